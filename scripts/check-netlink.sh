#!/usr/bin/env bash
# check-netlink.sh fails when Go code calls a vishvananda/netlink function
# that dumps a kernel table directly instead of through
# github.com/containernetworking/plugins/pkg/netlinksafe.
#
# Why: since netlink v1.2.1 a dump that the kernel flags NLM_F_DUMP_INTR (the
# table changed while it was being read: routine on a node where pods come and
# go) returns ErrDumpInterrupted, and an ADD that passes it on fails the pod.
# netlinksafe retries such a dump (5 attempts) and then returns what it read.
#
# The list is the forbidigo rule of containernetworking/plugins v1.9.1
# (.golangci.yml, copied there from moby/moby#48407). For a function that
# netlinksafe does not wrap, write a bounded retry on ErrDumpInterrupted and
# mark the call's line with the comment `// dump retried`. A subscription
# without ListExisting dumps nothing: mark its line `// no dump`.
#
# Usage: scripts/check-netlink.sh [FILE.go...]   (default: every tracked .go file)
set -euo pipefail
cd "$(dirname "$0")/.."

funcs='AddrList|BridgeVlanList|BridgeVlanTunnelShow|ChainList|ClassList|ConntrackTableList|ConntrackDeleteFilters?|DevLinkGetDeviceList|DevLinkGetAllPortList|DevlinkGetDeviceParams|FilterList|FouList|GenlFamilyList|GTPPDPList|LinkByName|LinkByAlias|LinkList|LinkSubscribeWithOptions|NeighList|NeighProxyList|NeighListExecute|NeighSubscribeWithOptions|LinkGetProtinfo|QdiscList|RdmaLinkList|RdmaLinkByName|RdmaLinkDel|RouteList|RouteListFiltered|RouteListFilteredIter|RouteSubscribeWithOptions|RuleList|RuleListFiltered|SocketGet|SocketDiagTCPInfo|SocketDiagTCP|SocketDiagUDPInfo|SocketDiagUDP|UnixSocketDiagInfo|UnixSocketDiag|VDPAGetDevConfigList|VDPAGetDevList|VDPAGetMGMTDevList|XfrmPolicyList|XfrmStateList|NewHandle|NewHandleAt'

if [ $# -gt 0 ]; then
	files=("$@")
else
	mapfile -t files < <(git ls-files '*.go')
fi
[ ${#files[@]} -gt 0 ] || exit 0

status=0
# A direct call (netlinksafe.X does not match: the dot must follow "netlink").
if hits=$(grep -nHE "(^|[^A-Za-z0-9_])netlink\.($funcs)\(" "${files[@]}" | grep -vE '// (dump retried|no dump)'); then
	echo "check-netlink: netlink dumps must go through github.com/containernetworking/plugins/pkg/netlinksafe" >&2
	echo "  (it retries ErrDumpInterrupted; see scripts/check-netlink.sh). Replace netlink.X( with netlinksafe.X( in:" >&2
	echo "$hits" | sed 's/^/  /' >&2
	status=1
fi
# An aliased import would hide the calls from the check above.
if hits=$(grep -nHE '^[[:space:]]*(import[[:space:]]+)?[A-Za-z_][A-Za-z0-9_]*[[:space:]]+"github.com/vishvananda/netlink"' "${files[@]}" |
	grep -vE '[[:space:]]netlink[[:space:]]+"github.com/vishvananda/netlink"' | grep -vE ':[0-9]+:[[:space:]]*import[[:space:]]+"github.com/vishvananda/netlink"'); then
	echo "check-netlink: import github.com/vishvananda/netlink without an alias (so scripts/check-netlink.sh sees its calls):" >&2
	echo "$hits" | sed 's/^/  /' >&2
	status=1
fi
exit $status
