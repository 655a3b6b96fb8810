#!/usr/bin/env bash
# Refreshes the charting library the HTML report inlines (third_party/chartjs/) from the npm
# registry: Chart.js, its annotation plugin (reference lines, phase boxes) and its matrix
# controller (heatmaps). Pin the versions here; the files are committed, so building needs no
# network. Run it by hand after changing a version, then rebuild and run the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(chart.js@4.6.1 chartjs-plugin-annotation@3.1.0 chartjs-chart-matrix@3.1.0)
# package name -> the minified UMD build inside its tarball
declare -A file=(
  [chart.js]=package/dist/chart.umd.min.js
  [chartjs-plugin-annotation]=package/dist/chartjs-plugin-annotation.min.js
  [chartjs-chart-matrix]=package/dist/chartjs-chart-matrix.min.js
)
out=third_party/chartjs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# Vendored charting library"
  echo
  echo "Inlined into every HTML report at build time (src/report/CMakeLists.txt). Refresh with"
  echo "scripts/vendor_charts.sh. Each file is the package's own minified UMD build, unchanged."
  echo
  echo "| package | version | file | license | sha256 |"
  echo "|---|---|---|---|---|"
} >"$tmp/README.md"
for spec in "${packages[@]}"; do
  name=${spec%@*}
  version=${spec##*@}
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  tarball=$(ls "$tmp"/"${name}"-"${version}".tgz)
  mkdir -p "$tmp/$name"
  tar xzf "$tarball" -C "$tmp/$name"
  cp "$tmp/$name/${file[$name]}" "$out/$name.min.js"
  license_file=$(ls "$tmp/$name"/package/LICENSE* | head -n 1)
  cp "$license_file" "$out/$name.LICENSE"
  license=$(sed -n 's/.*"license": *"\([^"]*\)".*/\1/p' "$tmp/$name/package/package.json")
  sum=$(sha256sum "$out/$name.min.js" | cut -d' ' -f1)
  echo "| $name | $version | $name.min.js | $license ($name.LICENSE) | \`$sum\` |" >>"$tmp/README.md"
done
cp "$tmp/README.md" "$out/README.md"
echo "vendor_charts: wrote $out"
