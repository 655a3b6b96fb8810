# Sourced by the scripts/record_*.sh scripts: step NAME COMMAND... runs COMMAND with its output in
# $logs/NAME.log, prints its exit status and time, and sets status=1 when it fails.
status=0
step() {
  local name="$1"
  shift
  echo "== $name: $*"
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - start)) s"
  [[ $rc -ne 0 ]] && status=1
  return $rc
}
