#!/usr/bin/env bash
# tests/integration/abi_compat.sh - binary compatibility across SDK minors:
# a module built against the frozen ABI 1.0 headers (tests/compat/sdk-1.0,
# a shorter descriptor without the 1.1 summary hook) loads and runs on this
# current ABI 1.x host; libfibril's symbols carry their version nodes; modules
# export exactly one symbol.
. "$top_srcdir/tests/lib/common.sh"

mods=$WORK/mods
build_module "$mods" old-module sdk="$top_srcdir/tests/compat/sdk-1.0"
build_module "$mods" new-module

start_agent "$mods"
modules=$(api http://x/v1/modules)
check "a module built for ABI 1.0 loads on the 1.$FIBRIL_ABI_MINOR host" python3 - "$modules" "$FIBRIL_ABI_MINOR" <<'PY'
import json, sys
mods = {m["name"]: m for m in json.loads(sys.argv[1])["modules"]}
assert mods["old-module"]["abi"] == "1.0", mods["old-module"]
assert mods["new-module"]["abi"] == "1." + sys.argv[2], mods["new-module"]
assert mods["old-module"]["state"] == "running"
PY
check "the 1.0 module has no summary (its descriptor has no such field)" python3 - "$(api http://x/v1/status)" <<'PY'
import json, sys
mods = {m["name"]: m for m in json.loads(sys.argv[1])["modules"]}
assert "summary" not in mods["old-module"]
PY
check "the 1.0 module serves its route" test "$(api -X POST -d '[1]' http://x/v1/tm/old-module/echo)" = "[1]"
stop_agent TERM

lib=$(readlink -f "$top_builddir/.libs/libfibril.so.1")
symbols=$(objdump -T "$lib")
check "libfibril's soname is libfibril.so.1" contains "$(objdump -p "$lib")" "SONAME               libfibril.so.1"
check "1.0 symbols are in node FIBRIL_1.0" grep -Eq 'FIBRIL_1\.0 +fibril_timer_add$' <<<"$symbols"
check "1.1 symbols are in node FIBRIL_1.1" grep -Eq 'FIBRIL_1\.1 +fibril_signal_watch$' <<<"$symbols"
check "1.2 symbols are in node FIBRIL_1.2" grep -Eq 'FIBRIL_1\.2 +fibril_ipalloc_next$' <<<"$symbols"
check "1.3 symbols are in node FIBRIL_1.3" grep -Eq 'FIBRIL_1\.3 +fibril_ipamstore_open$' <<<"$symbols"
check "1.7 symbols are in node FIBRIL_1.7" grep -Eq 'FIBRIL_1\.7 +fibril_stream_msg_new$' <<<"$symbols"
check "1.11 symbols are in node FIBRIL_1.11" grep -Eq 'FIBRIL_1\.11 +fibril_req_query_n$' <<<"$symbols"
check "host internals are not exported" test -z "$(grep -E ' (config_value|loader_load_file|bus_flush)$' <<<"$symbols")"
check "every exported SDK symbol starts with fibril_" test -z "$(awk '$2 == "g" && $4 ~ /FIBRIL/ {print $NF}' <<<"$symbols" | grep -v '^fibril_' || true)"
check "the 1.0 module binds to versioned 1.0 symbols" grep -Eq '\(FIBRIL_1\.0\) +fibril_config_string$' <<<"$(objdump -T "$mods/old-module.so")"
exported=$(nm -D --defined-only "$top_builddir/.libs/hello.so" | awk '{print $3}')
check "the example module exports exactly fibril_module_entry" test "$exported" = fibril_module_entry
exported=$(nm -D --defined-only "$mods/new-module.so" | awk '{print $3}')
check "a test module exports exactly fibril_module_entry" test "$exported" = fibril_module_entry

finish
