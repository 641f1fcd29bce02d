// Package k8s_test checks the Kubernetes manifests of deploy/k8s: every
// overlay is rendered with `kubectl kustomize` and each object is decoded
// strictly into its API type (an unknown or misspelled field fails), then the
// invariants between objects are checked, the KEDA query runs against a real
// ledger, the alert rules go through promtool and the containers' flags and
// probe paths are checked against the real binary.
package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// overlays are the directories under overlays/ a user applies.
var overlays = []string{"cpu", "gpu"}

// namespace is where every namespaced object lands.
const namespace = "precog"

// object is one rendered manifest, decoded strictly into Value (a pointer to
// its API type).
type object struct {
	APIVersion, Kind, Name, Namespace string
	JSON                              []byte
	Value                             any
}

// kinds maps apiVersion/kind to a new value of its Go type. A kind missing
// here fails the test: every object the overlays render is checked.
var kinds = map[string]func() any{
	"v1/Namespace":                            func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/PersistentVolumeClaim":                func() any { return new(corev1.PersistentVolumeClaim) },
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(monv1.PrometheusRule) },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return new(scaledObject) },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return new(triggerAuthentication) },
}

// The KEDA types: KEDA's Go module carries every scaler's client library, so
// these copy the fields of keda.sh/v1alpha1 (KEDA 2.x) a precog deployment
// may use; decoding stays strict, so a misspelled field still fails.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []kedaTrigger `json:"triggers"`
	} `json:"spec"`
}

type kedaTrigger struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	MetricType        string            `json:"metricType,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
}

// postgresqlTriggerKeys are the metadata keys of KEDA's postgresql scaler.
var postgresqlTriggerKeys = map[string]bool{
	"query": true, "targetQueryValue": true, "activationTargetQueryValue": true,
	"connectionFromEnv": true, "host": true, "port": true, "userName": true,
	"passwordFromEnv": true, "dbName": true, "sslmode": true,
}

type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
		Env []struct {
			Parameter     string `json:"parameter"`
			Name          string `json:"name"`
			ContainerName string `json:"containerName,omitempty"`
		} `json:"env,omitempty"`
	} `json:"spec"`
}

// decodeStrict decodes one object's JSON into a new value of its kind,
// refusing unknown fields at any depth.
func decodeStrict(data []byte) (object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return object{}, fmt.Errorf("read apiVersion/kind: %w", err)
	}
	o := object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, JSON: data}
	mk, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		return o, fmt.Errorf("%s %s: no Go type registered for %s/%s", head.Kind, head.Metadata.Name, head.APIVersion, head.Kind)
	}
	o.Value = mk()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(o.Value); err != nil {
		return o, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
	}
	return o, nil
}

// repoRoot is the module root, two levels up from deploy/k8s.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

// tool finds a command-line tool; missing is a failure (never a skip), as
// for redis-server and postgres: `make servers` installs it.
func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on PATH: run `make servers` (scripts/install-servers.sh installs it)", name)
	}
	return p
}

var kustomizeVersion = regexp.MustCompile(`Kustomize Version: v(\d+)\.`)

// kustomizeArgv is the command that renders a kustomization: `kubectl
// kustomize` when kubectl embeds kustomize v4 or later (older ones cannot
// take a directory in resources), else a standalone `kustomize build`.
func kustomizeArgv(t testing.TB) []string {
	t.Helper()
	if k, err := exec.LookPath("kubectl"); err == nil {
		out, _ := exec.Command(k, "version", "--client").CombinedOutput()
		if m := kustomizeVersion.FindSubmatch(out); m != nil {
			if major, _ := strconv.Atoi(string(m[1])); major >= 4 {
				return []string{k, "kustomize"}
			}
		}
	}
	if k, err := exec.LookPath("kustomize"); err == nil {
		return []string{k, "build"}
	}
	t.Fatal("neither kubectl with kustomize v4+ nor kustomize found: run `make servers` (scripts/install-servers.sh installs them)")
	return nil
}

var (
	renderMu    sync.Mutex
	renderCache = map[string][]object{}
)

// render renders overlays/<name> and decodes every object strictly; the
// result is cached for the test binary.
func render(t testing.TB, name string) []object {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if objs, ok := renderCache[name]; ok {
		return objs
	}
	argv := append(kustomizeArgv(t), filepath.Join("overlays", name))
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Errorf("%s warns: %s", strings.Join(argv, " "), s)
	}
	var objs []object
	var errs []error
	for i, doc := range splitDocs(out) {
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("overlay %s document %d: %w", name, i, err))
			continue
		}
		o, err := decodeStrict(js)
		if err != nil {
			errs = append(errs, fmt.Errorf("overlay %s: %w", name, err))
			continue
		}
		objs = append(objs, o)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	renderCache[name] = objs
	return objs
}

// splitDocs splits a multi-document YAML stream at its "---" lines.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// ofKind returns the overlay's objects of kind, typed.
func ofKind[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.Value.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestOverlaysRenderAndDecodeStrictly(t *testing.T) {
	want := map[string][]string{
		"cpu": {"Deployment/precog-worker-default", "Deployment/precog-scheduler", "Deployment/precog-api",
			"ScaledObject/precog-worker-default", "HorizontalPodAutoscaler/precog-api", "PrometheusRule/precog"},
		"gpu": {"Deployment/precog-worker-default", "Deployment/precog-worker-gpu", "ScaledObject/precog-worker-gpu"},
	}
	for _, ov := range overlays {
		objs := render(t, ov)
		have := map[string]bool{}
		for _, o := range objs {
			have[o.Kind+"/"+o.Name] = true
			if o.Kind != "Namespace" && o.Namespace != namespace {
				t.Errorf("overlay %s: %s %s is in namespace %q, want %q", ov, o.Kind, o.Name, o.Namespace, namespace)
			}
		}
		for _, w := range want[ov] {
			if !have[w] {
				t.Errorf("overlay %s renders no %s", ov, w)
			}
		}
		t.Logf("overlay %s: %d objects", ov, len(objs))
	}
}

// The decoder must refuse a misspelled field in a core type and in the
// copied KEDA types alike, or the checks above prove nothing.
func TestStrictDecodeRefusesMisspelledFields(t *testing.T) {
	objs := render(t, "gpu")
	cases := map[string][2]string{
		"Deployment":            {`"terminationGracePeriodSeconds"`, `"terminationGracePeriodSecond"`},
		"ScaledObject":          {`"minReplicaCount"`, `"minReplicasCount"`},
		"PrometheusRule":        {`"expr"`, `"expression"`},
		"TriggerAuthentication": {`"secretTargetRef"`, `"secretTargetRefs"`},
	}
	for kind, c := range cases {
		var found bool
		for _, o := range objs {
			if o.Kind != kind || !bytes.Contains(o.JSON, []byte(c[0])) {
				continue
			}
			found = true
			bad := bytes.Replace(o.JSON, []byte(c[0]), []byte(c[1]), 1)
			if _, err := decodeStrict(bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Errorf("%s %s with %s: decode error %v, want an unknown field", kind, o.Name, c[1], err)
			}
			break
		}
		if !found {
			t.Errorf("no %s with %s rendered", kind, c[0])
		}
	}
}
