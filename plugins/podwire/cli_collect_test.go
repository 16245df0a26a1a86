package main

import (
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"
)

// TestCollect: `podwire collect` removes a stale attachment by DEL's path
// (record, elements, route, host rp_filter, lock free), refuses a record of
// another pod UID (leaving it whole), and finds nothing to do the second
// time.
func TestCollect(t *testing.T) {
	n := newTestNode(t)
	n.wire(router)
	args := n.args(router, true, n.conf("1.0.0", router, true, nil))
	args.Args += ";K8S_POD_UID=u-router"
	if _, _, err := testutils.CmdAddWithArgs(args, func() error { return n.p.cmdAdd(args) }); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	rec := n.record(router)
	elems := n.podElements(rec)
	entry := n.conf("1.0.0", testPod{}, false, nil)

	res, err := n.p.collect(entry, router.id, "eth0", "u-other")
	if err == nil || !strings.Contains(err.Error(), "u-router") || res.Collected {
		t.Fatalf("collect with another UID: %+v, %v; want a refusal naming the record's UID", res, err)
	}
	if n.record(router) == nil || count(present(n.nft, elems)) != count(elems) || len(n.links.routes) != 1 {
		t.Fatalf("a refused collect changed the attachment: record %v, elements %v, routes %v",
			n.record(router), present(n.nft, elems), n.links.routes)
	}

	res, err = n.p.collect(entry, router.id, "eth0", "u-router")
	if err != nil || !res.Collected || res.Pod != "nf-a/router" {
		t.Fatalf("collect: %+v, %v", res, err)
	}
	n.assertGone("collect", router, elems)

	if res, err = n.p.collect(entry, router.id, "eth0", "u-router"); err != nil || res.Collected {
		t.Errorf("second collect: %+v, %v; want nothing to do", res, err)
	}
}
