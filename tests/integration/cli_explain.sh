#!/usr/bin/env bash
# tests/integration/cli_explain.sh - the CLI and the agent explain
# themselves (issue 26): against an agent with the hello module alone, a
# command whose module is not loaded (service, observe, observe -f) names
# that module and how to enable it; per-command help (`fibril policy
# --help`, `fibril help observe`, `fibril help service`); "did you mean"
# for a mistyped command and for a mistyped module in [agent] modules
# (which changes nothing: the agent refuses to start); --print-config and
# --graph with no config file over a module directory with two IPAM
# providers print the defaults and the graph, and the ambiguity.
. "$top_srcdir/tests/lib/common.sh"
. "$top_srcdir/tests/lib/wait.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
for m in hello ipam-cluster-pool ipam-k8s-podcidr lb; do
	[ -f "$top_builddir/.libs/$m.so" ] || skip_or_fail "module $m is not built (configured without it?)"
done

cli() { CRC=0; "$CLI" --socket "$WORK/fibril.sock" "$@" >"$WORK/out" 2>"$WORK/err" || CRC=$?; }
out_has() { grep -Eq -- "$1" "$WORK/out" || { echo "  stdout has no /$1/:"; sed 's/^/    /' "$WORK/out"; return 1; }; }
err_has() { grep -Eq -- "$1" "$WORK/err" || { echo "  stderr has no /$1/:"; sed 's/^/    /' "$WORK/err"; return 1; }; }
rc_is() { [ "$CRC" = "$1" ] || { echo "  exit status $CRC, expected $1"; return 1; }; }
out_lacks() { ! grep -Eq -- "$1" "$WORK/out"; }
one_line_err() { [ "$(wc -l <"$WORK/err")" = 1 ] || { echo "  stderr is not one line:"; cat "$WORK/err"; return 1; }; }

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
install -m 0644 "$top_builddir/.libs/hello.so" "$mods/hello.so"

# ---- an agent without lb and hubble-lite -----------------------------------------
start_agent "$mods" || { fail "the agent starts with the hello module"; finish; exit 1; }
wait_for 10 agent_healthy || true

cli service list
check "service list without lb: exit 1, one line on stderr" eval 'rc_is 1 && one_line_err'
check "it says the path is missing, that lb serves it and how to enable it" \
	eval 'err_has "no such path: /v1/service \(HTTP 404\): served by the lb module, which this agent has not loaded; to enable it, .*\[agent\] modules"'

cli observe
check "observe without hubble-lite names hubble-lite and how to enable it" \
	eval 'rc_is 1 && one_line_err && err_has "/v1/flows.*\(HTTP 404\): served by the hubble-lite module, which this agent has not loaded; to enable it"'

cli observe -f
check "observe -f without hubble-lite names hubble-lite too" \
	eval 'rc_is 1 && one_line_err && err_has "refused the stream /v1/flows/stream: (HTTP/1.1 404[^:]*|no answer): served by the hubble-lite module, which this agent has not loaded; to enable it"'

cli status
check "a path the host serves still answers (status works)" eval 'rc_is 0 && out_has "^State: +running"'
cli map dump no_such_map
check "a 404 of the host that is not a missing route has no module hint" \
	eval 'rc_is 1 && ! grep -q "served by" "$WORK/err" && err_has "HTTP 404"'

# ---- per-command help --------------------------------------------------------------
cli policy --help
check "fibril policy --help: the policy command's help, exit 0" \
	eval 'rc_is 0 && out_has "^Usage: fibril policy import" && out_has "policy trace" && out_lacks "^Commands:"'
cli --help policy
check "fibril --help policy: the same" eval 'rc_is 0 && out_has "^Usage: fibril policy import"'
cli help observe
check "fibril help observe: observe's own help (its filters), exit 0" \
	eval 'rc_is 0 && out_has "^Usage: fibril .*observe" && out_has "--since" && out_lacks "^Commands:"'
cli help service
check "fibril help service names the lb module" eval 'rc_is 0 && out_has "^Usage: fibril service list" && out_has "lb module"'
cli --help
check "fibril --help alone: the general help" eval 'rc_is 0 && out_has "^Commands:" && out_has "help \[COMMAND\]"'
cli help nosuch
check "help for an unknown command: usage error" eval 'rc_is 2 && err_has "help: unknown command .nosuch."'

# ---- did you mean ------------------------------------------------------------------
cli servce list
check "a mistyped command: did you mean 'service'?, exit 2" \
	eval "rc_is 2 && one_line_err && err_has \"unknown command 'servce'; did you mean 'service'\\?\""
cli stauts
check "a mistyped argument-less command: did you mean 'status'?" \
	eval "rc_is 2 && err_has \"did you mean 'status'\\?\""
cli xyzzy
check "a word close to no command: no suggestion" eval 'rc_is 2 && ! grep -q "did you mean" "$WORK/err"'
stop_agent || true

install -m 0644 "$top_builddir/.libs/lb.so" "$mods/lb.so"
rm -rf "$WORK/state"
ARC=0
mapfile -t args < <(agent_args "$mods")
timeout 20 "$AGENT" "${args[@]}" --set agent.modules=hello,lbb >"$WORK/typo.log" 2>&1 || ARC=$?
check "[agent] modules = hello,lbb: the agent refuses to start" test "$ARC" = 1
check "it names the missing module and suggests lb" \
	grep -Eq "module 'lbb' listed in \[agent\] modules: .*/lbb.so not found; did you mean 'lb'\?" "$WORK/typo.log"
check "nothing was created (no socket, no state dir)" eval '[ ! -e "$WORK/fibril.sock" ] && [ ! -e "$WORK/state" ]'

# ---- --print-config and --graph with no config and two IPAM providers ----------------
amb=$WORK/amb
mkdir -p "$amb"
chmod 0755 "$amb"
for m in ipam-cluster-pool ipam-k8s-podcidr hello; do
	install -m 0644 "$top_builddir/.libs/$m.so" "$amb/$m.so"
done
ARC=0
# no --config: the default path (absent or not, --set decides the modules)
"$AGENT" --config "$WORK/none.conf" --print-config --set "agent.module-dir=$amb" \
	>"$WORK/pc.out" 2>"$WORK/pc.err" || ARC=$?
check "--print-config with an explicit missing config is refused (that file is named)" \
	eval '[ "$ARC" = 1 ] && grep -q "none.conf" "$WORK/pc.err"'
ARC=0
"$AGENT" --print-config --set "agent.module-dir=$amb" \
	>"$WORK/pc.out" 2>"$WORK/pc.err" || ARC=$?
[ -e /etc/fibril/fibril.conf ] && echo "NOTE: /etc/fibril/fibril.conf exists: it is read as the default config"
check "--print-config with two IPAM providers: exit 0" test "$ARC" = 0
check "it prints the defaults of every module's section" \
	eval 'grep -q "^\[agent\]" "$WORK/pc.out" && grep -q "^\[ipam-cluster-pool\]" "$WORK/pc.out" && grep -q "^\[ipam-k8s-podcidr\]" "$WORK/pc.out" && grep -q "^\[providers\]" "$WORK/pc.out"'
check "it says the IPAM provider is ambiguous and how to choose" \
	grep -Eq "warning: ambiguous capability 'ipam': provided by ipam-cluster-pool .* and ipam-k8s-podcidr .*choose one with \[providers\] ipam = NAME" "$WORK/pc.err"
ARC=0
"$AGENT" --graph --set "agent.module-dir=$amb" >"$WORK/g.out" 2>"$WORK/g.err" || ARC=$?
check "--graph with two IPAM providers: exit 0, the start order, the ambiguity" \
	eval '[ "$ARC" = 0 ] && grep -q "^start order" "$WORK/g.out" && grep -q "ambiguous capability .ipam." "$WORK/g.err"'
ARC=0
"$AGENT" --graph=dot --set "agent.module-dir=$amb" >"$WORK/g.out" 2>"$WORK/g.err" || ARC=$?
check "--graph=dot too: a digraph on stdout, the ambiguity on stderr" \
	eval '[ "$ARC" = 0 ] && grep -q "^digraph fibril" "$WORK/g.out" && grep -q "ambiguous capability" "$WORK/g.err"'
ARC=0
"$AGENT" --check --set "agent.module-dir=$amb" >"$WORK/c.out" 2>&1 || ARC=$?
check "--check still refuses the ambiguity (a start would)" \
	eval '[ "$ARC" != 0 ] && grep -q "ambiguous capability" "$WORK/c.out"'
ARC=0
"$AGENT" --print-config --set "agent.module-dir=$amb" --set providers.ipam=ipam-cluster-pool \
	>"$WORK/pc.out" 2>"$WORK/pc.err" || ARC=$?
check "with [providers] ipam chosen: no warning" eval '[ "$ARC" = 0 ] && ! grep -q ambiguous "$WORK/pc.err"'

finish
