package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/podwire/podwire/integration/k8s/cluster"
)

// tenant is an ordinary user of the cluster: a ServiceAccount whose Role,
// bound in each of its namespaces, grants only what a team that runs pods
// needs (pods: create, get, list, watch, delete; events: get, list). It
// acts through kubectl with a kubeconfig that holds nothing but the
// ServiceAccount's token (TokenRequest API): no client certificate, so no
// group but the ServiceAccount's own.
type tenant struct {
	// user is the username the apiserver authenticates the token as.
	user       string
	kubeconfig string
	cacheDir   string
}

// tenantRole is the Role of the tenant in each of its namespaces.
const tenantRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: tenant
  namespace: %[1]s
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: tenant
  namespace: %[1]s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: tenant
subjects:
- kind: ServiceAccount
  name: %[2]s
  namespace: %[3]s
`

// newTenant makes, as the admin, the namespaces (the first is the
// tenant's home, holding its ServiceAccount), the tenant's Role in each,
// and a token of an hour for the ServiceAccount; it returns the tenant,
// checked to be authenticated as that ServiceAccount and nothing more. The
// namespaces are deleted when the test ends.
func newTenant(t *testing.T, namespaces ...string) *tenant {
	t.Helper()
	home, sa := namespaces[0], "tenant"
	for _, ns := range namespaces {
		kubectl(t, "", "create", "namespace", ns)
		t.Cleanup(func() { kubectl(t, "", "delete", "namespace", ns, "--wait=true", "--timeout=120s") })
	}
	kubectl(t, "", "create", "serviceaccount", "-n", home, sa)
	for _, ns := range namespaces {
		kubectl(t, fmt.Sprintf(tenantRole, ns, sa, home), "apply", "-f", "-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range namespaces {
		// Pods are refused until the namespace's default ServiceAccount
		// exists (the ServiceAccount admission plugin).
		if err := c.WaitServiceAccount(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	token := strings.TrimSpace(kubectl(t, "", "create", "token", "-n", home, sa, "--duration=1h"))
	dir := t.TempDir()
	tn := &tenant{user: "system:serviceaccount:" + home + ":" + sa,
		kubeconfig: filepath.Join(dir, "tenant.kubeconfig"), cacheDir: filepath.Join(dir, "cache")}
	if err := c.WriteKubeconfig(tn.kubeconfig, "tenant", &clientcmdapi.AuthInfo{Token: token}, home); err != nil {
		t.Fatal(err)
	}
	out, err := tn.kubectl(ctx, "", "auth", "whoami", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var who struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &who); err != nil {
		t.Fatalf("kubectl auth whoami: %v\n%s", err, out)
	}
	if u := who.Status.UserInfo; u.Username != tn.user || strings.Contains(strings.Join(u.Groups, ","), "system:masters") {
		t.Fatalf("the tenant's kubectl is %q in groups %v, want %s alone", u.Username, u.Groups, tn.user)
	}
	return tn
}

// kubectl runs the cluster's kubectl as the tenant (cluster.KubectlAs),
// with stdin; it returns stdout, and an error carrying stderr.
func (tn *tenant) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	out, err := c.KubectlAs(ctx, tn.kubeconfig, tn.cacheDir, stdin, args...)
	if err != nil {
		err = fmt.Errorf("as %s: %w", tn.user, err)
	}
	return out, err
}

// must is kubectl bounded by 2 minutes, failing t on an error.
func (tn *tenant) must(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return c.MustKubectlAs(t, tn.kubeconfig, tn.cacheDir, stdin, args...)
}

// forbidden runs kubectl as the tenant and fails t unless the apiserver
// refused it as Forbidden (RBAC).
func (tn *tenant) forbidden(t *testing.T, what string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := tn.kubectl(ctx, "", args...)
	if err == nil || !strings.Contains(err.Error(), "Forbidden") && !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the tenant could %s, want Forbidden: %v\n%s", what, err, out)
	}
	t.Logf("the tenant may not %s: %s", what, firstLine(err.Error()))
}

// createPod creates, as the tenant, the pod namespace/name on node n
// (spec.nodeName, as a team pinning a pod may) with annotations, running
// the pause image; it returns the pod's UID without waiting for it.
func (tn *tenant) createPod(t *testing.T, namespace, name string, n *cluster.Node, annotations map[string]string) string {
	t.Helper()
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": namespace, "annotations": annotations},
		"spec": map[string]any{
			"nodeName": n.Name, "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
			"containers": []map[string]any{{"name": "main", "image": cluster.PauseImage, "imagePullPolicy": "Never"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tn.must(t, string(manifest), "create", "-f", "-")
	return strings.TrimSpace(tn.must(t, "", "get", "pod", "-n", namespace, name, "-o", "jsonpath={.metadata.uid}"))
}

// deletePod deletes, as the tenant, the pod namespace/name and waits
// until it is gone from the API.
func (tn *tenant) deletePod(t *testing.T, namespace, name string) {
	t.Helper()
	tn.must(t, "", "delete", "pod", "-n", namespace, name, "--ignore-not-found", "--wait=true", "--timeout=90s")
}

// event is what the tests read of a core/v1 Event.
type event = cluster.PodEvent

// podEvents lists, as the tenant, the Events of the pod namespace/name
// with uid.
func (tn *tenant) podEvents(ctx context.Context, namespace, name, uid string) ([]event, error) {
	out, err := tn.kubectl(ctx, "", "get", "--raw",
		"/api/v1/namespaces/"+namespace+"/events?fieldSelector=involvedObject.name%3D"+name)
	if err != nil {
		return nil, err
	}
	var list struct{ Items []event }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("events of %s/%s: %v\n%s", namespace, name, err, out)
	}
	var evs []event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.UID == uid {
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// refusedEvents waits up to a minute, reading as the tenant, for the
// PodwireRefused Event of the podwire agent on the pod namespace/name with
// uid and for the kubelet's FailedCreatePodSandBox Events (the runtime's CNI
// errors, one per sandbox tried), and returns the former's message and the
// latter's.
func (tn *tenant) refusedEvents(t *testing.T, namespace, name, uid string) (refused string, sandbox []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		evs, err := tn.podEvents(ctx, namespace, name, uid)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if refused, sandbox, ok := cluster.Refusal(evs); ok {
			return refused, sandbox
		}
		if time.Now().After(deadline) {
			desc, _ := c.Kubectl(context.Background(), "", "describe", "pod", "-n", namespace, name)
			t.Fatalf("no PodwireRefused Event (and the kubelet's FailedCreatePodSandBox) on %s/%s within a minute:\n%s", namespace, name, desc)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
