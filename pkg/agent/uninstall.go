package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/podwire/podwire/pkg/forwarding"
	"github.com/podwire/podwire/pkg/install"
	"github.com/podwire/podwire/pkg/state"
)

var daemonSetsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

// Uninstall tells an uninstall from a restart when the agent stops (the
// chart's cni.uninstall). Cilium's cni.uninstall removes its CNI
// configuration on every agent stop; podwire does it only when the stop is
// an uninstall, never on a rolling update or a restart, since an entry
// taken out while the next agent starts would let pods start unchecked
// (fail open). The agent's own DaemonSet says which: a metadata-only watch
// of that one object while the agent runs, and one GET at the stop
// (Decide). RBAC: get, list and watch on that DaemonSet (a namespaced
// Role).
type Uninstall struct {
	client    metadata.Interface
	namespace string
	name      string
	informer  cache.SharedIndexInformer

	// watchGrace bounds how long Decide waits for the watch's word when
	// the GET does not settle the question.
	watchGrace time.Duration

	mu sync.Mutex
	// uid is the DaemonSet the agent first saw: the one that made its
	// pod (a reinstall makes another, with another UID).
	uid ktypes.UID
	// deleted: the watch saw uid deleted or being deleted.
	deleted bool
	// decided is closed when Decide returns: the watch may stop.
	decided     chan struct{}
	decidedOnce sync.Once
}

// uninstallWatchGrace is Uninstall.watchGrace: within the agent's stop
// budget (stop's 3 s), long enough for a watch event already sent.
const uninstallWatchGrace = 2 * time.Second

// NewUninstall follows the DaemonSet namespace/name; Run starts the watch.
func NewUninstall(client metadata.Interface, namespace, name string, resync time.Duration) *Uninstall {
	u := &Uninstall{client: client, namespace: namespace, name: name, watchGrace: uninstallWatchGrace, decided: make(chan struct{})}
	inf := metadatainformer.NewFilteredMetadataInformer(client, daemonSetsResource, namespace, resync,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name })
	u.informer = inf.Informer()
	_, _ = u.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { u.seen(o, false) },
		UpdateFunc: func(_, o any) { u.seen(o, false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			u.seen(o, true)
		},
	})
	return u
}

// Run runs the watch until ctx ends and then until Decide has returned
// (at most uninstallStopBudget): the SIGTERM that ends the agent's ctx at an
// uninstall may come before the DaemonSet's DELETED event, which Decide
// waits for.
func (u *Uninstall) Run(ctx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go u.informer.Run(wctx.Done())
	<-ctx.Done()
	t := time.NewTimer(uninstallStopBudget)
	defer t.Stop()
	select {
	case <-u.decided:
	case <-t.C:
	}
}

// uninstallStopBudget bounds how long the watch outlives the agent's
// context: the stop's own budget (stop, 3 s) and a margin.
const uninstallStopBudget = 10 * time.Second

// seen records an event of the watch.
func (u *Uninstall) seen(o any, gone bool) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.uid == "" {
		u.uid = m.UID
	}
	if m.UID == u.uid && (gone || m.DeletionTimestamp != nil) {
		u.deleted = true
	}
}

// Decide says whether the agent's stop now is an uninstall, and why, from
// one GET of the DaemonSet (bounded by ctx) and what the watch saw. Only a
// deletion of the DaemonSet the agent saw, positively observed, is an
// uninstall: a stop decided wrongly as one lets new pods start unchecked
// until the next agent runs, a stop decided wrongly as a restart only
// leaves podwire in the chain, doing its job.
//   - being deleted (deletionTimestamp set), or the watch saw it deleted:
//     an uninstall;
//   - not found, once the watch has synced and seen the DaemonSet (so the
//     name is right and it existed): an uninstall;
//   - present, not being deleted: a restart or an update (present with
//     another UID: a reinstall, whose agent owns the node now): keep;
//   - anything else, a 401 or 403 included (a force-deleted agent pod's
//     token, an RBAC change), a 404 the watch cannot vouch for, no answer:
//     keep, and say why.
//
// The stop can come before the watch's event: the garbage collector
// deletes the agent's pod as soon as it sees the DaemonSet gone, while
// the DELETED event may still be on its way to this agent, and helm
// uninstall deletes the agent's Role right after the DaemonSet, so the
// GET is then refused. When the GET settles nothing, Decide waits up to
// watchGrace (within ctx) for the watch before it decides.
func (u *Uninstall) Decide(ctx context.Context) (uninstall bool, reason string) {
	defer u.decidedOnce.Do(func() { close(u.decided) })
	ds := u.namespace + "/" + u.name
	m, err := u.client.Resource(daemonSetsResource).Namespace(u.namespace).Get(ctx, u.name, metav1.GetOptions{})
	u.mu.Lock()
	uid, watched := u.uid, u.deleted
	u.mu.Unlock()
	if err != nil && !watched && !(apierrors.IsNotFound(err) && uid != "" && u.informer.HasSynced()) {
		uid, watched = u.awaitDeletion(ctx)
	}
	switch {
	case err == nil && uid != "" && m.UID != uid:
		return false, fmt.Sprintf("DaemonSet %s was replaced (uid %s, was %s): the new one's agent keeps podwire on the node", ds, m.UID, uid)
	case err == nil && m.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s is being deleted", ds)
	case err == nil:
		return false, fmt.Sprintf("DaemonSet %s is in place: a restart or an update", ds)
	case watched:
		return true, fmt.Sprintf("the watch saw DaemonSet %s (uid %s) deleted (the GET: %v)", ds, uid, err)
	case apierrors.IsNotFound(err) && uid != "" && u.informer.HasSynced():
		return true, fmt.Sprintf("DaemonSet %s (uid %s) is gone", ds, uid)
	case apierrors.IsNotFound(err):
		return false, fmt.Sprintf("DaemonSet %s not found, but the watch never saw it: keeping podwire on the node (is --daemonset right?)", ds)
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return false, fmt.Sprintf("the agent may not read DaemonSet %s and the watch saw no deletion: keeping podwire on the node: %v", ds, err)
	default:
		return false, fmt.Sprintf("cannot tell a restart from an uninstall, keeping podwire on the node: GET of DaemonSet %s failed: %v", ds, err)
	}
}

// awaitDeletion waits until the watch has seen the DaemonSet deleted,
// watchGrace has passed or ctx ends, and returns what the watch saw.
func (u *Uninstall) awaitDeletion(ctx context.Context) (ktypes.UID, bool) {
	grace := time.NewTimer(u.watchGrace)
	defer grace.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		u.mu.Lock()
		uid, deleted := u.uid, u.deleted
		u.mu.Unlock()
		if deleted {
			return uid, true
		}
		select {
		case <-ctx.Done():
			return uid, false
		case <-grace.C:
			return uid, false
		case <-tick.C:
		}
	}
}

// stop runs when the agent's context ends: with cni.uninstall, if the
// stop is an uninstall (Decide), podwire leaves the node (uninstallNode).
func (a *Agent) stop() {
	if a.cfg.Cluster.Uninstall == nil {
		a.log.Info("agent stopping: podwire stays on the node (cni.uninstall off)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	uninstall, reason := a.cfg.Cluster.Uninstall.Decide(ctx)
	if !uninstall {
		a.log.Info("agent stopping: podwire stays on the node", "reason", reason)
		return
	}
	a.log.Info("agent stopping for an uninstall", "reason", reason)
	if err := a.uninstallNode(reason); err != nil {
		a.log.Error("uninstall incomplete", "error", err)
	}
}

// uninstallNode writes the uninstall marker under the node lock, naming
// the files that hold podwire in the chain (the node's paths). If no
// attachment is recorded, podwire leaves the node at once: the entry, the
// binary, the tables, the bridge and stateDir (install.FinishUninstall).
// Otherwise all of it stays until the DEL of the last pod podwire wired:
// containerd runs a pod's DEL through the chain it has then, so that DEL
// needs podwire's entry, and the binary. Meanwhile the plugin's ADD wires
// no new pod.
func (a *Agent) uninstallNode(reason string) error {
	conflist := a.conflist()
	// The entry names the node resources.
	entry := a.cfg.Chain.Entry
	if conflist != "" {
		if data, err := os.ReadFile(conflist); err == nil {
			if e, ok, err := install.Entry(data); err == nil && ok {
				entry = e
			}
		}
	}
	conf, err := install.ParseEntry(entry)
	if err != nil {
		return err
	}
	unlock, err := state.New(a.cfg.StateDir).Lock()
	if err != nil {
		return err
	}
	defer unlock()
	conflists, derived := a.cfg.Chain.files(conflist)
	m := install.Marker{Time: time.Now().UTC(), Reason: reason, Derived: a.cfg.Chain.nodePath(derived)}
	for _, f := range conflists {
		m.Conflists = append(m.Conflists, a.cfg.Chain.nodePath(f))
	}
	if err := install.MarkUninstalled(a.cfg.StateDir, m); err != nil {
		return err
	}
	// The routes toward other nodes' forwarding pods go now: no agent
	// keeps them current any more.
	if _, deleted, err := forwarding.SyncRemoteRoutes(nil); err != nil {
		a.log.Warn("routes to other nodes' forwarding pods not all removed", "error", err)
	} else if len(deleted) > 0 {
		a.log.Info("routes to other nodes' forwarding pods removed", "routes", deleted)
	}
	bin := ""
	if a.cfg.Chain.BinDir != "" {
		bin = filepath.Join(a.cfg.Chain.BinDir, install.PluginType)
	}
	res, done, err := install.FinishUninstall(install.NodeOptions{StateDir: a.cfg.StateDir, Bridge: conf.Bridge, Uplink: conf.Uplink},
		&install.Marker{Conflists: conflists, Derived: derived}, bin)
	if err != nil {
		return err
	}
	if done {
		a.log.Info("no attachment recorded: podwire removed from the node", "conflists", res.Conflists, "binary", res.Binary,
			"tables", res.Tables, "bridge", res.Bridge, "stateDir", res.StateDir, "kept", res.Kept)
	} else {
		a.log.Info("the entry, the binary and the tables stay until the DEL of the last pod podwire wired; new pods are not wired", "kept", res.Kept)
	}
	return nil
}

// clearUninstalled removes an uninstall marker (a re-install after an
// uninstall) under the node lock, before the binary is installed: a last
// DEL holding the lock first removes the old binary, and the install
// then puts the new one; one coming after finds no marker and keeps it.
func (a *Agent) clearUninstalled() error {
	if !install.Uninstalled(a.cfg.StateDir) {
		return nil
	}
	unlock, err := state.New(a.cfg.StateDir).Lock()
	if err != nil {
		return err
	}
	defer unlock()
	was, err := install.ClearUninstalled(a.cfg.StateDir)
	if was {
		a.log.Info("uninstall marker removed: podwire is installed again")
	}
	return err
}

// ParseDaemonSet splits "namespace/name" (--daemonset).
func ParseDaemonSet(ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("invalid DaemonSet %q: want NAMESPACE/NAME", ref)
	}
	return namespace, name, nil
}
