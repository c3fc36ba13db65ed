#!/usr/bin/env bash
# tests/integration/abi_growth.sh - the SDK's struct growth rules (libbpf's):
# modules built against the frozen 1.0 and 1.3 headers (shorter map specs,
# shorter config keys, the 1.2 kvstore arrays) load on this 1.4 host, whose
# structs have grown, and every field they set is read from the right place;
# the 1.4 fields (map_extra, deprecated_alias, a compare's prefix, an op's
# ignore_lease) are honoured; a module whose struct is longer than the
# host's with a non-zero byte the host does not know is refused with one
# line naming the struct and the module.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/etcd.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "needs root (root-owned modules, BPF maps)"

# ---- arrays carry their element size (checked in the headers) ---------------------------
# An array of structs handed over by a count and a pointer or offset without
# its element size cannot grow: tests/lib/sdk_arrays.py names any such field
# (it named lb.h's `backends` before SDK 1.9 gave it backend_sz).
out=$(python3 "$top_srcdir/tests/lib/sdk_arrays.py" "$top_srcdir"/sdk/include/fibril/*.h 2>&1)
check "every array of structs in the SDK carries its element size${out:+: $out}" test -z "$out"
printf 'struct t_ev {\n\tuint32_t sz;\n\tuint32_t nitems;\n\tuint32_t items;\n};\n' >"$WORK/arr.h"
check "... and the check itself names an array without one" \
	contains "$(python3 "$top_srcdir/tests/lib/sdk_arrays.py" "$WORK/arr.h")" "array \`items\` (nitems elements) has no element size"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
# build_grow NAME MAPNAME SDKDIR [cflags...] : tests/modules/growmod.c as NAME.so
build_grow() {
	local name=$1 map=$2 sdk=$3
	shift 3
	# shellcheck disable=SC2086
	$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
		${SAN_CFLAGS:-} -I"$sdk" -DGM_NAME="\"$name\"" -DGM_MAP="\"$map\"" "$@" \
		-o "$mods/$name.so" "$top_srcdir/tests/modules/growmod.c" -L"$top_builddir/.libs" -lfibril
	chmod 0644 "$mods/$name.so"
}
build_grow gm10 gm10 "$top_srcdir/tests/compat/sdk-1.0"
build_grow gm13 gm13 "$top_srcdir/tests/compat/sdk-1.3"
build_grow gm14 gm14 "$top_srcdir/sdk/include"
build_grow gmbig gmbig "$top_srcdir/sdk/include" -DGM_MAP_TOO_BIG

# jtest JSON EXPR: python EXPR over the document j is true
jtest() {
	python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' \
		"$1" "$2" && return 0
	echo "  false: $2"
	echo "  json: $1"
	return 1
}

# ---- config keys and map specs ----------------------------------------------------------
start_agent "$mods" --set gm10.beta=42 --set gm10.gamma=true --set gm13.beta=43 \
	--set gm13.gamma=true --set gm14.old-beta=44 --set gm14.gamma=true
for name in gm10 gm13; do
	want=$([ $name = gm10 ] && echo 42 || echo 43)
	s=$(api "http://x/v1/gm/$name")
	check "$name (ABI 1.${name#gm1}): every config key of its shorter array is read" \
		jtest "$s" "j['alpha'] == 'a-default' and j['beta'] == $want and j['gamma'] is True"
	check "$name: its shorter fibril_map_spec opens (missing map_extra reads as 0)" \
		jtest "$s" "j['map_rc'] == 0 and j['map_type'] == 1 and j['map_extra'] == 0"
done
s=$(api http://x/v1/gm/gm14)
check "gm14 (ABI 1.4): a key set by its deprecated_alias takes effect" \
	jtest "$s" "j['alpha'] == 'a-default' and j['beta'] == 44 and j['gamma'] is True"
check "gm14: the alias is warned about, naming the new key" \
	contains "$(cat "$WORK/agent.log")" "[gm14] 'old-beta' is deprecated, use 'beta'"
check "gm14: map_extra reaches the kernel (bloom filter with 3 hash functions)" \
	jtest "$s" "j['map_rc'] == 0 and j['map_type'] == 30 and j['map_extra'] == 3"
s=$(api http://x/v1/gm/gmbig)
check "a map spec longer than the host's with a non-zero unknown byte is refused (-E2BIG)" \
	jtest "$s" "j['map_rc'] == -7"
check "... with one line naming the module and the struct" \
	grep -q "module gmbig: map open refused: struct fibril_map_spec: size [0-9]* has non-zero byte" \
	"$WORK/agent.log"
check "... and no map is pinned for it" test ! -e "$BPFFS_DIR/gmbig"
stop_agent TERM

# ---- config keys longer than the host's --------------------------------------------------
mods2=$WORK/mods2
mkdir -p "$mods2"
chmod 0755 "$mods2"
mods=$mods2 build_grow gmkeys gmkeys "$top_srcdir/sdk/include" -DGM_KEYS_TOO_BIG
run_agent "$mods2" --check
check "config keys longer than the host's with a non-zero unknown byte stop the agent" test "$RC" != 0
check "... with one line naming the module and the struct" \
	contains "$OUT" "gmkeys.so: struct fibril_config_key #0: size"

# ---- kvstore arrays: a 1.3 caller (interface 1) and a 1.4 caller (interface 2) -----------
KVSTORE_SO=${KVSTORE_ETCD_SO:-$top_builddir/.libs/kvstore-etcd.so}
[ -f "$KVSTORE_SO" ] || { fail "$KVSTORE_SO is not built"; finish; exit 1; }
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
	note_or_fail "etcd/etcdctl not installed: the kvstore part did not run"
	finish
	exit $?
fi
etcd_start growth
# build_kvprobe DIR SDK : tests/modules/kvprobe.c against SDK into DIR
build_kvprobe() {
	mkdir -p "$1"
	chmod 0755 "$1"
	install -m 0644 "$KVSTORE_SO" "$1/kvstore-etcd.so"
	# shellcheck disable=SC2046,SC2086
	$CC -std=gnu11 -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-override-init \
		-Wno-unused-parameter ${SAN_CFLAGS:-} -I"$2" $(pkg-config --cflags json-c) \
		-o "$1/kvprobe.so" "$top_srcdir/tests/modules/kvprobe.c" \
		-L"$top_builddir/.libs" -lfibril $(pkg-config --libs json-c)
	chmod 0644 "$1/kvprobe.so"
}
jget() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" 2>/dev/null || echo "?"; }
# txn JSON : POST /v1/kvprobe/txn, wait for its callback, print the result
txn() {
	local out id
	out=$(api -X POST -H 'Content-Type: application/json' -d "$1" http://x/v1/kvprobe/txn) || true
	id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["op"])' "$out" 2>/dev/null) ||
		{ echo "$out"; return 0; }
	await_output 10 '"done":true' api "http://x/v1/kvprobe/op/$id" || true
}
kv_agent() {
	start_agent "$1" --set "kvstore-etcd.endpoints=$ETCD_ENDPOINT" --set kvstore-etcd.prefix=/g/
	wait_for 10 agent_healthy || true
}

build_kvprobe "$WORK/kv13" "$top_srcdir/tests/compat/sdk-1.3"
build_kvprobe "$WORK/kv14" "$top_srcdir/sdk/include"
etcdctl_run put /g/a 1 >/dev/null
etcdctl_run put /g/b 2 >/dev/null

kv_agent "$WORK/kv13"
# Two compares and two ops: read with the wrong stride, the second of each is garbage.
r=$(txn '{"compare":[{"key":"a","target":"value","result":"equal","value":"1"},
                     {"key":"b","target":"value","result":"equal","value":"2"}],
          "success":[{"type":"put","key":"c","value":"v13"},{"type":"get","key":"b"}]}')
check "a 1.3 module's txn (1.2 layout arrays) runs: both compares hold, both ops run" \
	jtest "$r" "j.get('err') == 0 and j.get('succeeded') is True and [kv['value'] for kv in j['kvs']] == ['2']"
check "... and its put landed" test "$(etcdctl_run get --print-value-only /g/c)" = v13
r=$(txn '{"compare":[{"key":"a","target":"value","result":"equal","value":"1"},
                     {"key":"b","target":"value","result":"equal","value":"nope"}],
          "success":[{"type":"put","key":"c","value":"wrong"}]}')
check "... its second compare is the one evaluated (fails here)" \
	jtest "$r" "j.get('err') == 0 and j.get('succeeded') is False"
stop_agent TERM

kv_agent "$WORK/kv14"
lease=$(etcdctl_run lease grant 600 | awk '{print $2}')
etcdctl_run put --lease="$lease" /g/l old >/dev/null
r=$(txn '{"compare":[{"key":"a","target":"version","result":"greater","number":0,"prefix":true}],
          "success":[{"type":"put","key":"l","value":"new","ignore_lease":true},{"type":"get","key":"l"}]}')
check "a 1.4 module's txn: a prefix compare and an ignore_lease put run" \
	jtest "$r" "j.get('err') == 0 and j.get('succeeded') is True and j['kvs'][0]['value'] == 'new'"
check "... ignore_lease kept the key's lease" \
	contains "$(etcdctl_run get -w json /g/l)" "\"lease\":$(printf '%d' "0x$lease")"
r=$(txn '{"compare":[{"key":"nothere","target":"version","result":"greater","number":0,"prefix":true}],
          "success":[{"type":"put","key":"x","value":"1"}]}')
check "... a prefix compare over no key does not hold" jtest "$r" "j.get('succeeded') is False"
stop_agent TERM
etcd_stop

finish
