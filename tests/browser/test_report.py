#!/usr/bin/env python3
"""The HTML report in a real browser (headless Chromium, driven over the DevTools protocol).

Makes a report from committed results with `gpu-basics report`, opens it and fails on:
  - a console error, an uncaught exception, a failed resource, or any resource at all beyond the
    file itself (the report must open offline);
  - a chart missing, extra, or drawn with another number of series than the expectation file
    says (written from the fixtures, not from the report);
  - a chart whose series drew no element, whose canvas stayed blank, or whose title or axis
    titles are missing;
  - a chart whose tooltip shows no value when the mouse is over a point;
  - a layout fault: a table cell whose text runs over the next column, a table cut off at the
    page's edge instead of scrolling in its own box, or two chart labels drawn over each other
    (at --width: the two-run report is also tested at 900 px);
  - a chart label without an opaque ground of the chart's background (light and dark);
  - a report of runs without its summary first, or a summary link that lands nowhere or leaves a
    section or figure unlinked;
  - a failure after switching to the dark colour scheme, or a PDF print without the charts.
It writes screenshots (light and dark, the whole page and each figure) to --out.

Exit codes: 0 pass, 1 fail, 77 skipped (no Chromium, outside CI).
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, BrowserError  # noqa: E402

INVENTORY = r"""
(() => {
  const out = [];
  for (const canvas of document.querySelectorAll('canvas[data-chart]')) {
    const chart = Chart.getChart(canvas);
    const r = {id: canvas.dataset.chart, drawn: !!chart};
    if (chart) {
      const area = chart.chartArea;
      r.title = chart.options.plugins.title.text || '';
      r.axes = Object.values(chart.scales).filter(s => s.options.display !== false)
          .map(s => ({id: s.id, title: s.options.title && s.options.title.display ? s.options.title.text : '',
                      unit: (chart.config.options.scales[s.id] || {}).gbUnit || '', type: s.type,
                      ticks: s.ticks.map(t => String(t.label))}));
      r.series = chart.data.datasets.map((d, i) => {
        const meta = chart.getDatasetMeta(i);
        const inside = meta.data.filter(el => {
          const p = el.getCenterPoint();
          return Number.isFinite(p.x) && Number.isFinite(p.y) &&
                 p.x >= area.left - 1 && p.x <= area.right + 1 && p.y >= area.top - 1 && p.y <= area.bottom + 1;
        }).length;
        const xs = chart.scales.x;
        const overTime = xs && xs.type === 'linear' &&
            (chart.config.options.scales.x || {}).gbUnit === 'seconds';
        const joined = meta.type === 'line' && d.showLine !== false && !d.stepped;
        return {label: d.label, elements: meta.data.length, inside,
                sparseLine: overTime && joined && meta.data.length > 1 && meta.data.length < 12};
      });
      // Read the pixels through a copy: reading the chart's own canvas back would make the page
      // log a performance warning of the test's making.
      const copy = document.createElement('canvas');
      copy.width = canvas.width;
      copy.height = canvas.height;
      const ctx = copy.getContext('2d', {willReadFrequently: true});
      ctx.drawImage(canvas, 0, 0);
      const img = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      let inked = 0;
      for (let i = 3; i < img.length; i += 4) if (img[i] > 0) inked++;
      r.inked = inked / (canvas.width * canvas.height);
    }
    out.push(r);
  }
  return out;
})()
"""

HOVER_TARGET = r"""
((id) => {
  const canvas = document.querySelector('canvas[data-chart="' + id + '"]');
  canvas.scrollIntoView({block: 'center'});
  const chart = Chart.getChart(canvas);
  for (let i = 0; i < chart.data.datasets.length; i++) {
    const els = chart.getDatasetMeta(i).data;
    if (!els.length) continue;
    const el = els[Math.floor(els.length / 2)];
    const p = el.getCenterPoint();
    const rect = canvas.getBoundingClientRect();
    const sx = rect.width / canvas.width * (window.devicePixelRatio || 1);
    const sy = rect.height / canvas.height * (window.devicePixelRatio || 1);
    return {x: rect.left + p.x * sx, y: rect.top + p.y * sy};
  }
  return null;
})
"""

TOOLTIP = r"""
((id) => {
  const chart = Chart.getChart(document.querySelector('canvas[data-chart="' + id + '"]'));
  const t = chart.tooltip;
  if (!t || !t.getActiveElements().length) return null;
  return (t.body || []).flatMap(b => b.lines).join(' | ');
})
"""

# The labels an annotation draws: a label annotation itself, or a line's or box's label.
LABELS_OF = "const labelsOf = (a) => a.constructor.id === 'labelAnnotation' ? [a] : (a.elements || []);"

LAYOUT = r"""
(() => {
  """ + LABELS_OF + r"""
  const out = [];
  const name = (el) => (el.closest('table') && el.closest('table').querySelector('caption')
      ? el.closest('table').querySelector('caption').textContent.trim().slice(0, 60) : 'table');
  for (const cell of document.querySelectorAll('td, th')) {
    if (cell.scrollWidth > cell.clientWidth + 1) {
      out.push(name(cell) + ': cell text runs over the next column (' + cell.scrollWidth +
               ' px in ' + cell.clientWidth + ' px): ' + cell.textContent.slice(0, 60));
      if (out.length > 5) return out;
    }
  }
  const edge = document.documentElement.clientWidth;
  for (const table of document.querySelectorAll('table')) {
    const r = table.getBoundingClientRect();
    if (r.width === 0) continue;
    let box = table.parentElement;
    while (box && box !== document.body && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
      box = box.parentElement;
    const scrolls = box && box !== document.body;
    if (!scrolls && r.right > edge + 1)
      out.push(name(table) + ': cut off at the page edge (' + Math.round(r.right) + ' px of ' + edge + ')');
    if (scrolls && box.getBoundingClientRect().right > edge + 1)
      out.push(name(table) + ': its scrolling box runs past the page edge');
  }
  const plugin = Chart.registry.getPlugin('annotation');
  for (const canvas of document.querySelectorAll('canvas[data-chart]')) {
    const chart = Chart.getChart(canvas);
    if (!chart || !plugin) continue;
    const boxes = plugin.getAnnotations(chart).flatMap(labelsOf)
        .filter(l => l.options && l.options.display !== false && l.width > 0);
    for (let i = 0; i < boxes.length; i++)
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        if (a.x < b.x2 && b.x < a.x2 && a.y < b.y2 && b.y < a.y2)
          out.push(canvas.dataset.chart + ': labels drawn over each other (' +
                   [a, b].map(l => [l.x, l.y, l.x2, l.y2].map(Math.round).join(',')).join(' and ') + ')');
      }
  }
  return out;
})()
"""


# Every label drawn on a chart (reference lines, phase boxes) stands on an opaque ground of the
# chart's own background, in the scheme shown: a series under it does not run through its text.
LABEL_GROUNDS = r"""
(() => {
  """ + LABELS_OF + r"""
  const out = [];
  const probe = document.createElement('canvas').getContext('2d');
  const norm = (c) => { probe.fillStyle = '#010203'; probe.fillStyle = c || 'transparent'; return probe.fillStyle; };
  const ground = norm(getComputedStyle(document.documentElement).getPropertyValue('--bg').trim());
  const plugin = Chart.registry.getPlugin('annotation');
  if (!plugin) return out;
  for (const canvas of document.querySelectorAll('canvas[data-chart]')) {
    const chart = Chart.getChart(canvas);
    if (!chart) continue;
    for (const l of plugin.getAnnotations(chart).flatMap(labelsOf)) {
      if (!l.options || l.options.display === false || !(l.width > 0)) continue;
      const c = norm(l.options.backgroundColor);
      if (c !== ground)
        out.push(canvas.dataset.chart + ': label "' + String(l.options.content).slice(0, 40) +
                 '" on ' + c + ', not on the chart\'s ground ' + ground);
    }
  }
  return out;
})()
"""

# In the charts named, where curves meet their reference lines: no label drawn across a series'
# line or point, and no line series hidden under another drawn over it along the same path (a
# solid line, or one of the same dashes: the one under it does not show through).
CLEAR = r"""
((ids) => {
  """ + LABELS_OF + r"""
  const out = [];
  const plugin = Chart.registry.getPlugin('annotation');
  const crosses = (b, p, q) => {  // segment p-q against box b (clipped, Liang-Barsky)
    let t0 = 0, t1 = 1;
    const dx = q.x - p.x, dy = q.y - p.y;
    for (const [e, f] of [[-dx, p.x - b.x], [dx, b.x2 - p.x], [-dy, p.y - b.y], [dy, b.y2 - p.y]]) {
      if (e === 0) { if (f < 0) return false; continue; }
      const t = f / e;
      if (e < 0) t0 = Math.max(t0, t); else t1 = Math.min(t1, t);
      if (t0 > t1) return false;
    }
    return true;
  };
  for (const id of ids) {
    const canvas = document.querySelector('canvas[data-chart="' + id + '"]');
    const chart = canvas && Chart.getChart(canvas);
    if (!chart) continue;
    const lines = chart.getSortedVisibleDatasetMetas().filter(m => m.type === 'line')
        .map(m => ({label: m.label, dash: JSON.stringify(m.dataset.options.borderDash || []),
                    pts: m.data.map(el => el.getCenterPoint())}));
    for (const l of plugin ? plugin.getAnnotations(chart).flatMap(labelsOf) : []) {
      if (!l.options || l.options.display === false || !(l.width > 0)) continue;
      for (const s of lines) {
        const hit = s.pts.some((p, i) => crosses(l, p, s.pts[Math.min(i + 1, s.pts.length - 1)]));
        if (hit)
          out.push(id + ': label "' + String(l.options.content).slice(0, 40) + '" drawn across ' +
                   'the line of "' + s.label + '"');
      }
    }
    // Drawn last to first: lines[i] is drawn over lines[j] for i < j.
    for (let i = 0; i < lines.length; i++)
      for (let j = i + 1; j < lines.length; j++) {
        const top = lines[i], under = lines[j];
        if (top.dash !== '[]' && top.dash !== under.dash) continue;
        const near = under.pts.filter(p => top.pts.some(q => Math.hypot(p.x - q.x, p.y - q.y) < 3));
        if (near.length >= Math.max(4, 0.4 * under.pts.length))
          out.push(id + ': "' + under.label + '" hidden under "' + top.label + '" (' +
                   (top.dash === '[]' ? 'solid' : 'same dashes') + ' over it)');
      }
  }
  return out;
})
"""

# The summary at the top of a report of runs: first in the page, within the first screen, its
# links each landing on an element, and a link to every section and figure.
SUMMARY = r"""
(() => {
  const out = [];
  const s = document.getElementById('summary');
  if (!s) return ['no summary'];
  if (document.querySelector('main > section') !== s) out.push('the summary is not the first section');
  const top = s.getBoundingClientRect().top + scrollY;
  if (top > 600) out.push('the summary starts ' + Math.round(top) + ' px down the page');
  const linked = new Set();
  for (const a of s.querySelectorAll('a[href^="#"]')) {
    const id = decodeURIComponent(a.getAttribute('href').slice(1));
    linked.add(id);
    if (!document.getElementById(id)) out.push('summary: link to #' + id + ' lands nowhere');
  }
  for (const e of document.querySelectorAll('main > section, figure.figure'))
    if (e.id && e !== s && !linked.has(e.id)) out.push('summary: no link to #' + e.id);
  return out;
})()
"""


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def check_inventory(inventory, expected, failures):
    ids = [c["id"] for c in inventory]
    if ids != list(expected):
        failures.append(f"charts: expected {list(expected)}, the page has {ids}")
    for c in inventory:
        if not c["drawn"]:
            failures.append(f"{c['id']}: no chart on its canvas")
            continue
        want = expected.get(c["id"])
        if want is not None and len(c["series"]) != want:
            failures.append(f"{c['id']}: {len(c['series'])} series, expected {want}")
        for s in c["series"]:
            if s.get("sparseLine"):
                failures.append(f"{c['id']}: series '{s['label']}' joins {s['elements']} samples "
                                "with straight lines (draw points or steps)")
            if s["inside"] == 0:
                failures.append(f"{c['id']}: series '{s['label']}' drew nothing inside the chart")
        if c["inked"] < 0.01:
            failures.append(f"{c['id']}: canvas blank ({c['inked']:.4f} of pixels drawn)")
        if not c["title"]:
            failures.append(f"{c['id']}: no title")
        for a in c["axes"]:
            if not a["title"]:
                failures.append(f"{c['id']}: axis {a['id']} has no title")
            if a["unit"] == "bytes" and a["type"] == "linear":
                odd = [t for t in a["ticks"] if not re.fullmatch(r"-?\d+ (B|KiB|MiB|GiB|TiB)", t)]
                if odd:
                    failures.append(f"{c['id']}: axis {a['id']} ticks at odd values {odd[:4]}")
            symbol = {"seconds": "s", "x": "\u00d7"}.get(a["unit"], a["unit"])
            if symbol and not re.search(r"(^|[ (])" + re.escape(symbol) + r"($|[ ),])",
                                        a["title"]):
                failures.append(f"{c['id']}: axis {a['id']} title {a['title']!r} does not name "
                                f"its unit ({symbol})")


def problems_in(events, page_url):
    found = []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.exceptionThrown":
            found.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:400])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            found.append(f"console.{p['type']}: {text[:400]}")
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            found.append("log: " + p["entry"].get("text", "")[:400])
        elif m == "Network.loadingFailed":
            found.append("failed resource: " + json.dumps(p)[:400])
        elif m == "Network.requestWillBeSent":
            url = p.get("request", {}).get("url", "")
            if url != page_url and not url.startswith("data:"):
                found.append("resource other than the report itself: " + url[:200])
    return found


def screenshot(browser, path, clip=None):
    params = {"format": "png", "captureBeyondViewport": True}
    if clip:
        params["clip"] = dict(clip, scale=1)
    data = browser.send("Page.captureScreenshot", params, timeout=60)["data"]
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))


def full_page(browser, width, path):
    height = browser.evaluate("document.documentElement.scrollHeight")
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": int(height), "deviceScaleFactor": 1, "mobile": False})
    browser.pump(0.8)  # charts resize to the new viewport
    screenshot(browser, path)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    browser.pump(0.5)


def figure_shots(browser, out, prefix):
    # Each figure's title, charts and notes (its tables left out), and the info cards.
    rects = browser.evaluate("""[...document.querySelectorAll('figure.figure, .cards')].map(f => {
        const r = f.getBoundingClientRect();
        const body = f.querySelector('.figure-body');
        const bottom = body ? body.getBoundingClientRect().bottom + 14 : r.bottom;
        return {id: f.id || 'info', x: r.left + scrollX, y: r.top + scrollY, width: r.width,
                height: bottom - r.top};
      })""")
    for r in rects:
        clip = {"x": r["x"], "y": r["y"], "width": r["width"], "height": min(r["height"], 1600)}
        screenshot(browser, os.path.join(out, f"{prefix}-{r['id']}.png"), clip)


def print_pdf(browser, path):
    """Prints the page; returns the number of path segments (l, c, re) in its content streams."""
    pdf = base64.b64decode(browser.send("Page.printToPDF", {"printBackground": True},
                                        timeout=120)["data"])
    if path:
        with open(path, "wb") as f:
            f.write(pdf)
    segments = 0
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", pdf, re.S):
        try:
            content = zlib.decompress(m.group(1))
        except zlib.error:
            continue  # fonts and images
        segments += len(re.findall(rb"(?:^|\s)(?:l|c|re)\s", content))
    return segments


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu-basics")
    ap.add_argument("--fixture", action="append")
    ap.add_argument("--html", help="check this report as it is (one written by --html on a GPU "
                                   "machine) instead of making one from --fixture")
    ap.add_argument("--advise", metavar="SNAPSHOT",
                    help="check the advice page of `gpu-basics advise SNAPSHOT --html`")
    ap.add_argument("--fit", action="append", default=[], help="with --advise: a --fit size")
    ap.add_argument("--replay", metavar="SNAPSHOT",
                    help="check the page `gpu-basics report` draws of `gpu-basics replay "
                         "SNAPSHOT --json`")
    ap.add_argument("--preflight", action="store_true",
                    help="check the page of `gpu-basics preflight ... --html`, of a synthetic job "
                         "recorded at batches 2, 4 and 8 (preflight_job.py) with --fit 256MiB")
    ap.add_argument("--pdf-segments-per-chart", type=int, default=50,
                    help="the path segments each chart must add to the PDF (a chart of a few "
                         "bars adds fewer than the noise of the comparison: 0 skips the check)")
    ap.add_argument("--expect", required=True, help="JSON: {chart id: series, ...} in page order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="report")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--clear", action="append", default=[], metavar="CHART",
                    help="a chart whose labels must not cross a series' line, and whose line "
                         "series must not hide under one another")
    args = ap.parse_args()

    chromium = find_chromium()
    if not chromium:
        if os.environ.get("CI") == "true":
            print("FAIL: no Chromium (scripts/install_deps.sh installs it when tests are built)")
            return 1
        print("SKIP: no Chromium (apt-get install chromium)")
        return 77
    os.makedirs(args.out, exist_ok=True)
    if args.html:
        html = os.path.abspath(args.html)
        print(f"report: {html} ({os.path.getsize(html) / 1024:.0f} KiB, as written)")
    elif args.gpu_basics and args.advise:
        html = os.path.abspath(os.path.join(args.out, args.name + ".html"))
        fits = [a for f in args.fit for a in ("--fit", f)]
        t0 = time.monotonic()
        made = subprocess.run([args.gpu_basics, "advise", args.advise, *fits, "--html", html],
                              capture_output=True, text=True)
        took = time.monotonic() - t0
        if made.returncode != 0:
            print(f"FAIL: gpu-basics advise exited {made.returncode}: {made.stderr.strip()}")
            return 1
        print(f"advice page: {html} ({os.path.getsize(html) / 1024:.0f} KiB, made in "
              f"{took * 1000:.0f} ms)")
    elif args.gpu_basics and args.replay:
        html = os.path.abspath(os.path.join(args.out, args.name + ".html"))
        saved = os.path.join(args.out, args.name + ".json")
        t0 = time.monotonic()
        for step in (["replay", args.replay, "--json", saved], ["report", saved, "-o", html]):
            made = subprocess.run([args.gpu_basics, *step], capture_output=True, text=True)
            if made.returncode != 0:
                print(f"FAIL: gpu-basics {step[0]} exited {made.returncode}: "
                      f"{made.stderr.strip()}")
                return 1
        print(f"replay page: {html} ({os.path.getsize(html) / 1024:.0f} KiB, made in "
              f"{(time.monotonic() - t0) * 1000:.0f} ms)")
    elif args.gpu_basics and args.preflight:
        from preflight_job import write_job
        html = os.path.abspath(os.path.join(args.out, args.name + ".html"))
        recordings = []
        for b in (2, 4, 8):
            recordings.append(os.path.join(args.out, f"{args.name}_b{b}.pickle"))
            write_job(recordings[-1], b)
        t0 = time.monotonic()
        made = subprocess.run([args.gpu_basics, "preflight", *recordings, "--batches", "2,4,8",
                               "--at", "16", "--fit", "256MiB", "--html", html],
                              capture_output=True, text=True)
        if made.returncode != 0:
            print(f"FAIL: gpu-basics preflight exited {made.returncode}: {made.stderr.strip()}")
            return 1
        print(f"preflight page: {html} ({os.path.getsize(html) / 1024:.0f} KiB, made in "
              f"{(time.monotonic() - t0) * 1000:.0f} ms)")
    elif args.gpu_basics and args.fixture:
        html = os.path.abspath(os.path.join(args.out, args.name + ".html"))
        t0 = time.monotonic()
        made = subprocess.run([args.gpu_basics, "report", *args.fixture, "-o", html],
                              capture_output=True, text=True)
        took = time.monotonic() - t0
        if made.returncode != 0:
            print(f"FAIL: gpu-basics report exited {made.returncode}: {made.stderr.strip()}")
            return 1
        size = os.path.getsize(html)
        print(f"report: {html} ({size / 1024:.0f} KiB, made in {took * 1000:.0f} ms)")
    else:
        ap.error("give --html, or --gpu-basics and --fixture, --advise, --replay or --preflight")
    with open(args.expect) as f:
        expected = json.load(f)

    failures = []
    inventory = []
    hovered = 0
    browser = Browser(chromium, args.width, 1000)
    try:
        browser.open_page()
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(domain + ".enable")
        browser.send("Emulation.setEmulatedMedia",
                     {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        url = "file://" + html
        browser.send("Page.navigate", {"url": url})
        browser.wait_for("Page.loadEventFired", timeout=60)
        browser.pump(0.5)

        inventory = browser.evaluate(INVENTORY)
        check_inventory(inventory, expected, failures)
        failures += ["layout: " + f for f in browser.evaluate(LAYOUT)]
        failures += ["light: " + f for f in browser.evaluate(LABEL_GROUNDS)]
        failures += browser.evaluate(CLEAR + f"({json.dumps(args.clear)})")
        if args.fixture or args.html:
            failures += browser.evaluate(SUMMARY)
            print("summary: " + " | ".join(browser.evaluate(
                "[...document.querySelectorAll('#summary tr')].map(r => r.innerText"
                ".replace(/\\s+/g, ' ').trim())")))
        hovered = 0
        for c in inventory:
            if not c["drawn"]:
                continue
            target = browser.evaluate(HOVER_TARGET + f"({json.dumps(c['id'])})")
            if target is None:
                failures.append(f"{c['id']}: nothing to hover")
                continue
            browser.pump(0.1)
            target = browser.evaluate(HOVER_TARGET + f"({json.dumps(c['id'])})")
            browser.send("Input.dispatchMouseEvent",
                         {"type": "mouseMoved", "x": target["x"], "y": target["y"]})
            browser.pump(0.1)
            text = browser.evaluate(TOOLTIP + f"({json.dumps(c['id'])})")
            if not text or not any(ch.isdigit() for ch in text):
                failures.append(f"{c['id']}: hovering a point shows no value (tooltip: {text!r})")
            else:
                hovered += 1
                if c is inventory[0]:
                    print(f"hover on {c['id']}: {text}")
        browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 0, "y": 0})
        browser.evaluate("window.scrollTo(0, 0)")
        full_page(browser, args.width, os.path.join(args.out, args.name + "-light.png"))
        figure_shots(browser, args.out, args.name + "-light")

        # Dark: the page follows prefers-color-scheme and redraws every chart.
        browser.send("Emulation.setEmulatedMedia",
                     {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        browser.pump(0.5)
        dark = browser.evaluate(INVENTORY)
        check_inventory(dark, expected, failures)
        failures += ["dark: " + f for f in browser.evaluate(LABEL_GROUNDS)]
        failures += ["layout, dark: " + f for f in browser.evaluate(LAYOUT)]
        background = browser.evaluate("getComputedStyle(document.body).backgroundColor")
        if background in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"):
            failures.append(f"dark scheme: the page background stayed {background}")
        full_page(browser, args.width, os.path.join(args.out, args.name + "-dark.png"))
        figure_shots(browser, args.out, args.name + "-dark")

        # Print to PDF: Chromium prints a canvas as vector drawing, so the charts' lines are
        # counted in the PDF's content and compared with a print of the same page with no chart
        # drawn (the canvases unbound from their configurations).
        browser.evaluate("window.gbPrints = 0; addEventListener('beforeprint', () => gbPrints++)")
        with_charts = print_pdf(browser, os.path.join(args.out, args.name + ".pdf"))
        if browser.evaluate("gbPrints") < 1:
            failures.append("PDF: printing did not fire beforeprint (charts not redrawn for paper)")
        after_print = browser.evaluate(INVENTORY)
        check_inventory(after_print, expected, failures)
        browser.evaluate("""document.querySelectorAll('canvas[data-chart]').forEach(c => {
            Chart.getChart(c).destroy(); c.removeAttribute('data-chart'); })""")
        without = print_pdf(browser, None)
        print(f"PDF: {with_charts} path segments with the charts, {without} without")
        if (args.pdf_segments_per_chart > 0 and
                with_charts - without < args.pdf_segments_per_chart * len(expected)):
            failures.append(f"PDF: the charts add only {with_charts - without} path segments "
                            f"for {len(expected)} charts: they did not reach the paper")

        failures += problems_in(browser.events, url)
    except BrowserError as e:
        failures.append(f"browser: {e}")
    finally:
        browser.close()

    series = sum(len(c.get("series", [])) for c in inventory)
    print(f"{len(inventory)} charts, {series} series, {hovered} tooltips checked, "
          f"screenshots in {args.out}")
    for f in failures:
        print("FAIL: " + f)
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
