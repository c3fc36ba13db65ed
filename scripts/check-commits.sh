#!/usr/bin/env bash
# scripts/check-commits.sh - commit messages follow git's convention: a
# subject line of at most 72 characters, and when there is a body, a blank
# line between it and the subject (so `git log --oneline` reads).
#   check-commits.sh --message FILE   one message (the commit-msg hook)
#   check-commits.sh [BASE]           every non-merge commit in BASE..HEAD;
#                                     BASE defaults to the first commit the
#                                     rule applies to (round 3's start)
# Prints one line per offending commit; exits 1 if there is any.
set -euo pipefail
MAX=72
RULE_START=d721b63 # commits before this one predate the rule
RULE_START_DATE='2026-11-26 04:58:16 +0000' # just after it (for shallow clones)

check_message() { # NAME < message
	local name=$1 subject second
	# comments (git's template) are not part of the message
	local msg
	msg=$(grep -v '^#' || true)
	subject=$(printf '%s\n' "$msg" | sed -n 1p)
	second=$(printf '%s\n' "$msg" | sed -n 2p)
	local bad=0
	if [ -z "$subject" ]; then
		echo "$name: empty subject line"
		bad=1
	elif [ "${#subject}" -gt "$MAX" ]; then
		echo "$name: subject is ${#subject} characters (at most $MAX; the why goes in the body): $subject"
		bad=1
	fi
	if [ -n "$second" ]; then
		echo "$name: the second line must be blank (subject, blank line, body)"
		bad=1
	fi
	return $bad
}

if [ "${1:-}" = --message ]; then
	check_message "commit message" <"$2"
	exit
fi

cd "$(dirname "$0")/.."
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "check-commits: not a git checkout (a release tarball): no history to check"
	exit 0
fi
base=${1:-$RULE_START}
if git cat-file -e "$base^{commit}" 2>/dev/null; then
	range=("$base..HEAD")
elif [ -z "${1:-}" ]; then
	# a shallow clone without the rule's first commit: the commits it has
	# that are younger than that commit
	echo "check-commits: $base is not in this clone (shallow?): checking the commits after $RULE_START_DATE"
	range=(--since="$RULE_START_DATE" HEAD)
	base="$RULE_START_DATE"
else
	echo "check-commits: $base is not a commit of this clone"
	exit 1
fi
fails=0 n=0
for c in $(git rev-list --no-merges "${range[@]}"); do
	n=$((n + 1))
	git log -1 --format=%B "$c" | check_message "$(git log -1 --format='%h' "$c")" || fails=$((fails + 1))
done
echo "check-commits: $n commits since $base, $fails with a message off the convention"
[ "$fails" -eq 0 ]
