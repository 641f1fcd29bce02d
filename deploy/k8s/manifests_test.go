package k8s_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/precog-ml/precog/jobs"
)

// secretKeys are the Secrets the manifests reference, created by hand as
// docs/kubernetes.md says, with the keys precog itself reads ("precog-sinks" holds
// whatever ${VAR}s the job specs name).
var secretKeys = map[string][]string{
	"precog-ledger":     {"PRECOG_DATABASE_URL"},
	"precog-sinks":      nil,
	"precog-api-tokens": {"PRECOG_API_TOKENS"},
}

// gpuResource is the NVIDIA device plugin's resource.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// worker is a worker pool's Deployment with its parsed flags.
type worker struct {
	dep     *appsv1.Deployment
	c       corev1.Container
	flags   map[string]string
	pool    string
	devices []string
	// parallel is --parallel: shards in flight per device.
	parallel int
}

func isWorker(d *appsv1.Deployment) bool {
	return d.Spec.Template.Labels["app.kubernetes.io/component"] == "worker"
}

// workers returns the overlay's worker Deployments.
func workers(t *testing.T, objs []object) []worker {
	t.Helper()
	var out []worker
	for _, d := range ofKind[appsv1.Deployment](objs) {
		if !isWorker(d) {
			continue
		}
		if n := len(d.Spec.Template.Spec.Containers); n != 1 {
			t.Fatalf("worker %s has %d containers, want 1", d.Name, n)
		}
		c := d.Spec.Template.Spec.Containers[0]
		sub, flags := parseArgs(t, "Deployment "+d.Name, c.Args)
		if sub != "worker" {
			t.Fatalf("worker Deployment %s runs precog %s", d.Name, sub)
		}
		w := worker{dep: d, c: c, flags: flags, pool: flags["pool"]}
		for _, dev := range strings.Split(flags["devices"], ",") {
			w.devices = append(w.devices, strings.TrimSpace(dev))
		}
		if w.pool == "" || flags["devices"] == "" {
			t.Fatalf("worker %s: --pool and --devices must be explicit, got %q", d.Name, c.Args)
		}
		// Explicit: 0 would size itself by the pod's cores, and KEDA's
		// targetQueryValue must be the shards a pod takes.
		var err error
		if w.parallel, err = strconv.Atoi(flags["parallel"]); err != nil || w.parallel < 1 {
			t.Fatalf("worker %s: --parallel must be explicit and > 0, got %q", d.Name, flags["parallel"])
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		t.Fatal("no worker Deployment rendered")
	}
	return out
}

func TestWorkerPools(t *testing.T) {
	for _, ov := range overlays {
		objs := render(t, ov)
		scaled := map[string]*scaledObject{}
		for _, so := range ofKind[scaledObject](objs) {
			scaled[so.Spec.ScaleTargetRef.Name] = so
		}
		pools := map[string]bool{}
		for _, w := range workers(t, objs) {
			where := fmt.Sprintf("overlay %s: worker %s", ov, w.dep.Name)
			if pools[w.pool] {
				t.Errorf("%s: pool %s has two Deployments", where, w.pool)
			}
			pools[w.pool] = true
			if got := w.dep.Spec.Template.Labels["precog.dev/pool"]; got != w.pool {
				t.Errorf("%s: label precog.dev/pool %q, --pool %q", where, got, w.pool)
			}
			checkDrain(t, where, w)
			checkDevices(t, where, w)
			checkCPUSizing(t, where, w)
			checkScaledObject(t, where, w, scaled[w.dep.Name])
		}
	}
}

// checkDrain: a worker scaled away gets SIGTERM and must finish or release
// its shards before the kubelet's SIGKILL.
func checkDrain(t *testing.T, where string, w worker) {
	drain, err := time.ParseDuration(w.flags["drain-timeout"])
	if err != nil {
		t.Errorf("%s: --drain-timeout must be explicit: %v", where, err)
		return
	}
	g := w.dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Errorf("%s: no terminationGracePeriodSeconds (default 30s) for --drain-timeout %s", where, drain)
	} else if time.Duration(*g)*time.Second <= drain+10*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed --drain-timeout %s by more than 10s", where, *g, drain)
	}
}

// checkCPUSizing: a CPU worker without a CPU limit takes GOMAXPROCS from
// its CPU request, since Go and model.sessions/threads: auto size
// themselves by GOMAXPROCS, which would otherwise count the node's cores.
func checkCPUSizing(t *testing.T, where string, w worker) {
	if _, limited := w.c.Resources.Limits[corev1.ResourceCPU]; limited {
		return
	}
	for _, e := range w.c.Env {
		if e.Name == "GOMAXPROCS" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "requests.cpu" {
			if _, ok := w.c.Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Errorf("%s: GOMAXPROCS follows requests.cpu, but the container requests no CPU", where)
			}
			return
		}
	}
	t.Errorf("%s: no CPU limit and no GOMAXPROCS from requests.cpu: Go and the model's auto sessions would size themselves by the node's cores", where)
}

// checkDevices: one claim loop per GPU the pod is given, on GPU nodes only.
func checkDevices(t *testing.T, where string, w worker) {
	spec := w.dep.Spec.Template.Spec
	var gpus int64
	if q, ok := w.c.Resources.Limits[gpuResource]; ok {
		gpus = q.Value()
	}
	if w.devices[0] == "cpu" {
		if len(w.devices) != 1 || gpus != 0 {
			t.Errorf("%s: --devices %v with nvidia.com/gpu limit %d", where, w.devices, gpus)
		}
		return
	}
	for i, d := range w.devices {
		if d != "cuda:"+strconv.Itoa(i) {
			t.Errorf("%s: --devices %v: device %d is %q, want cuda:%d (the device plugin numbers a pod's GPUs from 0)", where, w.devices, i, d, i)
		}
	}
	if gpus != int64(len(w.devices)) {
		t.Errorf("%s: --devices lists %d GPUs, limits.nvidia.com/gpu is %d", where, len(w.devices), gpus)
	}
	if _, ok := w.c.Resources.Requests[gpuResource]; ok {
		if w.c.Resources.Requests[gpuResource] != w.c.Resources.Limits[gpuResource] {
			t.Errorf("%s: nvidia.com/gpu request differs from its limit", where)
		}
	}
	if len(spec.NodeSelector) == 0 {
		t.Errorf("%s: a GPU worker needs a nodeSelector for the GPU node pool", where)
	}
	tolerates := false
	for _, tol := range spec.Tolerations {
		tolerates = tolerates || (tol.Key == string(gpuResource) && tol.Effect == corev1.TaintEffectNoSchedule)
	}
	if !tolerates {
		t.Errorf("%s: no NoSchedule toleration for %s", where, gpuResource)
	}
	if !strings.Contains(w.c.Image, "gpu") {
		t.Errorf("%s: image %q is not the GPU image (the CPU image's ONNX Runtime has no CUDA provider)", where, w.c.Image)
	}
}

// checkScaledObject: KEDA scales the pool from zero on its own ledger count,
// one pod per (--devices entries × --parallel) shards.
func checkScaledObject(t *testing.T, where string, w worker, so *scaledObject) {
	if so == nil {
		t.Errorf("%s: no ScaledObject targets it", where)
		return
	}
	if k := so.Spec.ScaleTargetRef.Kind; k != "" && k != "Deployment" {
		t.Errorf("%s: ScaledObject targets a %s", where, k)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 {
		t.Errorf("%s: ScaledObject minReplicaCount %v, want 0 (an idle pool costs nothing)", where, so.Spec.MinReplicaCount)
	}
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < 1 {
		t.Errorf("%s: ScaledObject maxReplicaCount %v", where, so.Spec.MaxReplicaCount)
	}
	if r := w.dep.Spec.Replicas; r == nil || *r != 0 {
		t.Errorf("%s: replicas %v: KEDA owns the count, start at 0", where, r)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "postgresql" {
		t.Errorf("%s: want one postgresql trigger, have %+v", where, so.Spec.Triggers)
		return
	}
	tr := so.Spec.Triggers[0]
	for k := range tr.Metadata {
		if !postgresqlTriggerKeys[k] {
			t.Errorf("%s: the postgresql trigger has no metadata %q", where, k)
		}
	}
	if tr.AuthenticationRef == nil {
		t.Errorf("%s: the trigger has no authenticationRef (the ledger URL is a secret)", where)
	}
	if got, want := tr.Metadata["targetQueryValue"], strconv.Itoa(len(w.devices)*w.parallel); got != want {
		t.Errorf("%s: targetQueryValue %q, want %s (devices × --parallel: the shards a pod works on at once)", where, got, want)
	}
	if got := tr.Metadata["activationTargetQueryValue"]; got != "0" {
		t.Errorf("%s: activationTargetQueryValue %q, want \"0\" (the first pending shard wakes the pool)", where, got)
	}
	if !strings.Contains(tr.Metadata["query"], "'"+w.pool+"'") {
		t.Errorf("%s: the query does not name pool %q: %s", where, w.pool, tr.Metadata["query"])
	}
}

// addrPort is the port of a --addr flag (":9090" → 9090), def when unset.
func addrPort(t *testing.T, where, addr string, def int) int {
	if addr == "" {
		return def
	}
	_, p, ok := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		t.Fatalf("%s: --addr %q has no port", where, addr)
	}
	return n
}

// Probes point at /readyz and /healthz on the port the command serves them on.
func TestProbesTargetTheServedPort(t *testing.T) {
	for _, ov := range overlays {
		for _, d := range ofKind[appsv1.Deployment](render(t, ov)) {
			for _, c := range d.Spec.Template.Spec.Containers {
				where := fmt.Sprintf("overlay %s: %s/%s", ov, d.Name, c.Name)
				sub, flags := parseArgs(t, where, c.Args)
				def := 0
				switch sub {
				case "serve":
					def = 8080 // serve's --addr default
				case "dashboard":
					def = 8081 // dashboard's --addr default
				}
				port := addrPort(t, where, flags["addr"], def)
				if port == 0 {
					t.Errorf("%s: precog %s without --addr serves no probes", where, sub)
					continue
				}
				probes := map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe}
				for path, p := range probes {
					if p == nil || p.HTTPGet == nil {
						t.Errorf("%s: no HTTP probe on %s", where, path)
						continue
					}
					if p.HTTPGet.Path != path {
						t.Errorf("%s: probe path %s, want %s", where, p.HTTPGet.Path, path)
					}
					if got := containerPort(c, p.HTTPGet.Port); got != port {
						t.Errorf("%s: probe on %s resolves to port %d, the command serves on %d", where, p.HTTPGet.Port.String(), got, port)
					}
				}
			}
		}
	}
}

// containerPort resolves a named or numbered port of c (0: none).
func containerPort(c corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// Every container's args are real flags of its precog subcommand, and every
// Deployment runs the subcommand its component says.
func TestContainerArgsAreRealFlags(t *testing.T) {
	want := map[string]string{"worker": "worker", "scheduler": "scheduler", "api": "serve", "dashboard": "dashboard"}
	for _, ov := range overlays {
		for _, d := range ofKind[appsv1.Deployment](render(t, ov)) {
			for _, c := range d.Spec.Template.Spec.Containers {
				sub, flags := parseArgs(t, fmt.Sprintf("overlay %s: %s", ov, d.Name), c.Args)
				comp := d.Spec.Template.Labels["app.kubernetes.io/component"]
				if want[comp] != sub {
					t.Errorf("overlay %s: %s (component %q) runs precog %s", ov, d.Name, comp, sub)
				}
				if _, ok := flags["insecure-no-auth"]; ok {
					t.Errorf("overlay %s: %s serves without authentication", ov, d.Name)
				}
				if sub == "dashboard" {
					checkDashboard(t, fmt.Sprintf("overlay %s: %s", ov, d.Name), c, flags)
				}
				if (sub == "scheduler" || sub == "serve" || sub == "dashboard") && flags["jobs"] != "/jobs" {
					t.Errorf("overlay %s: %s: --jobs %q, want /jobs (the precog-jobs mount)", ov, d.Name, flags["jobs"])
				}
			}
		}
	}
}

// checkDashboard: the dashboard reads the Postgres ledger (no embedded
// one in a pod) and takes its tokens from precog-api-tokens or a mounted
// --tokens-file: without either it refuses to start.
func checkDashboard(t *testing.T, where string, c corev1.Container, flags map[string]string) {
	secrets := map[string]bool{}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			secrets[e.SecretRef.Name] = true
		}
	}
	if !secrets["precog-ledger"] && flags["db"] == "" {
		t.Errorf("%s: no ledger: want envFrom precog-ledger (PRECOG_DATABASE_URL)", where)
	}
	if !secrets["precog-api-tokens"] && flags["tokens-file"] == "" {
		t.Errorf("%s: no tokens: want envFrom precog-api-tokens (PRECOG_API_TOKENS) or --tokens-file", where)
	}
}

// TestDashboardDeployed: every overlay runs the dashboard behind a Service
// and a PodDisruptionBudget.
func TestDashboardDeployed(t *testing.T) {
	for _, ov := range overlays {
		objs := render(t, ov)
		found := map[string]bool{}
		for _, d := range ofKind[appsv1.Deployment](objs) {
			found["Deployment"] = found["Deployment"] || d.Spec.Template.Labels["app.kubernetes.io/component"] == "dashboard"
		}
		for _, s := range ofKind[corev1.Service](objs) {
			found["Service"] = found["Service"] || s.Spec.Selector["app.kubernetes.io/component"] == "dashboard"
		}
		for _, p := range ofKind[policyv1.PodDisruptionBudget](objs) {
			found["PodDisruptionBudget"] = found["PodDisruptionBudget"] || p.Spec.Selector.MatchLabels["app.kubernetes.io/component"] == "dashboard"
		}
		for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget"} {
			if !found[kind] {
				t.Errorf("overlay %s: no %s for the dashboard", ov, kind)
			}
		}
	}
}

// TestWorkersKeepNoState: rejects are stored in the ledger, so a worker
// pod has no state volume (an emptyDir would be lost with the pod, and
// suggest that something lives there).
func TestWorkersKeepNoState(t *testing.T) {
	for _, ov := range overlays {
		for _, w := range workers(t, render(t, ov)) {
			for _, m := range w.c.VolumeMounts {
				if m.MountPath == "/var/lib/precog" {
					t.Errorf("overlay %s: worker %s mounts %s at PRECOG_STATE_DIR; a worker keeps nothing there", ov, w.dep.Name, m.Name)
				}
			}
		}
	}
}

// References between objects resolve: selectors select, claims, ConfigMaps
// and Secrets exist or are the documented hand-made ones, and every volume
// is mounted at one path in every pod (job specs name absolute paths).
func TestReferencesResolve(t *testing.T) {
	for _, ov := range overlays {
		objs := render(t, ov)
		names := map[string]bool{}
		for _, o := range objs {
			names[o.Kind+"/"+o.Name] = true
		}
		deps := ofKind[appsv1.Deployment](objs)
		selects := func(sel map[string]string) *appsv1.Deployment {
			for _, d := range deps {
				if len(sel) > 0 && subset(sel, d.Spec.Template.Labels) {
					return d
				}
			}
			return nil
		}
		mountPaths := map[string]string{}
		for _, d := range deps {
			where := fmt.Sprintf("overlay %s: %s", ov, d.Name)
			if !subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Errorf("%s: selector %v does not select its pods %v", where, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
			checkPodRefs(t, where, d.Spec.Template.Spec, names, mountPaths)
		}
		for _, s := range ofKind[corev1.Service](objs) {
			d := selects(s.Spec.Selector)
			if d == nil {
				t.Errorf("overlay %s: Service %s selects no Deployment", ov, s.Name)
				continue
			}
			for _, p := range s.Spec.Ports {
				if containerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort) == 0 {
					t.Errorf("overlay %s: Service %s targets port %s that %s does not have", ov, s.Name, p.TargetPort.String(), d.Name)
				}
			}
		}
		for _, p := range ofKind[policyv1.PodDisruptionBudget](objs) {
			d := selects(p.Spec.Selector.MatchLabels)
			if d == nil || d.Spec.Replicas == nil || p.Spec.MinAvailable == nil || int(*d.Spec.Replicas) <= p.Spec.MinAvailable.IntValue() {
				t.Errorf("overlay %s: PodDisruptionBudget %s selects %v: it must leave room to evict one pod", ov, p.Name, d)
			}
		}
		for _, h := range ofKind[autoscalingv2.HorizontalPodAutoscaler](objs) {
			if !names["Deployment/"+h.Spec.ScaleTargetRef.Name] || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
				t.Errorf("overlay %s: HPA %s targets %s with minReplicas %v (want an existing Deployment, ≥ 2 for its PDB)", ov, h.Name, h.Spec.ScaleTargetRef.Name, h.Spec.MinReplicas)
			}
		}
		checkServiceMonitors(t, ov, objs)
		for _, ta := range ofKind[triggerAuthentication](objs) {
			for _, r := range ta.Spec.SecretTargetRef {
				if r.Parameter != "connection" || !contains(secretKeys[r.Name], r.Key) {
					t.Errorf("overlay %s: TriggerAuthentication %s: %+v, want parameter connection from precog-ledger/PRECOG_DATABASE_URL", ov, ta.Name, r)
				}
			}
		}
		for _, so := range ofKind[scaledObject](objs) {
			if ref := so.Spec.Triggers[0].AuthenticationRef; ref != nil && !names["TriggerAuthentication/"+ref.Name] {
				t.Errorf("overlay %s: ScaledObject %s uses TriggerAuthentication %s, not rendered", ov, so.Name, ref.Name)
			}
		}
	}
}

func checkPodRefs(t *testing.T, where string, spec corev1.PodSpec, names map[string]bool, mountPaths map[string]string) {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		switch {
		case v.PersistentVolumeClaim != nil && !names["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName]:
			t.Errorf("%s: volume %s claims %s, not rendered", where, v.Name, v.PersistentVolumeClaim.ClaimName)
		case v.ConfigMap != nil && !names["ConfigMap/"+v.ConfigMap.Name]:
			t.Errorf("%s: volume %s uses ConfigMap %s, not rendered", where, v.Name, v.ConfigMap.Name)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: precog needs no Kubernetes API token: set automountServiceAccountToken: false", where)
	}
	for _, c := range spec.Containers {
		for _, e := range c.EnvFrom {
			if e.SecretRef == nil {
				continue
			}
			if _, ok := secretKeys[e.SecretRef.Name]; !ok {
				t.Errorf("%s: envFrom Secret %s is not one docs/kubernetes.md has the user create", where, e.SecretRef.Name)
			}
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: want a read-only root and no privilege escalation", where, c.Name)
		}
		for _, m := range c.VolumeMounts {
			v, ok := vols[m.Name]
			if !ok {
				t.Errorf("%s: mount %s has no volume", where, m.Name)
				continue
			}
			var key string
			switch {
			case v.PersistentVolumeClaim != nil:
				key = "claim " + v.PersistentVolumeClaim.ClaimName
				if !m.ReadOnly || !v.PersistentVolumeClaim.ReadOnly {
					t.Errorf("%s: %s is mounted writable; precog only reads models and data", where, key)
				}
			case v.ConfigMap != nil:
				key = "configmap " + v.ConfigMap.Name
			default:
				continue
			}
			if p, ok := mountPaths[key]; ok && p != m.MountPath {
				t.Errorf("%s: %s mounted at %s, elsewhere at %s: a spec's absolute paths must resolve alike in every pod", where, key, m.MountPath, p)
			}
			mountPaths[key] = m.MountPath
		}
	}
}

func checkServiceMonitors(t *testing.T, ov string, objs []object) {
	svcs := ofKind[corev1.Service](objs)
	for _, sm := range ofKind[monv1.ServiceMonitor](objs) {
		var svc *corev1.Service
		for _, s := range svcs {
			if subset(sm.Spec.Selector.MatchLabels, s.Labels) {
				svc = s
			}
		}
		if svc == nil {
			t.Errorf("overlay %s: ServiceMonitor %s selects no Service", ov, sm.Name)
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == ep.Port
			}
			if !found || ep.Path != "/metrics" {
				t.Errorf("overlay %s: ServiceMonitor %s scrapes %s%s, Service %s has no such port", ov, sm.Name, ep.Port, ep.Path, svc.Name)
			}
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Every job spec the overlay ships parses strictly, runs on a pool the
// overlay has workers for, and names models and data under the mounts.
func TestJobSpecsMatchPools(t *testing.T) {
	anyEnv := func(string) (string, bool) { return "set-by-precog-sinks", true }
	for _, ov := range overlays {
		objs := render(t, ov)
		pools := map[string]bool{}
		for _, w := range workers(t, objs) {
			pools[w.pool] = true
		}
		var specs int
		for _, cm := range ofKind[corev1.ConfigMap](objs) {
			if !strings.HasPrefix(cm.Name, "precog-jobs") {
				continue
			}
			for file, data := range cm.Data {
				specs++
				where := fmt.Sprintf("overlay %s: job spec %s", ov, file)
				spec, err := jobs.Parse([]byte(data), "/jobs/"+file, nil, anyEnv)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				if !pools[spec.Pool] {
					t.Errorf("%s: pool %q has no worker Deployment in this overlay (pools %v)", where, spec.Pool, pools)
				}
				paths := []string{spec.Model.Path}
				if spec.Source.Parquet != nil {
					paths = append(paths, spec.Source.Parquet.Path)
				}
				for _, p := range paths {
					if !strings.HasPrefix(p, "/models/") && !strings.HasPrefix(p, "/data/") {
						t.Errorf("%s: path %s is not under the /models or /data mounts", where, p)
					}
				}
			}
		}
		if specs == 0 {
			t.Errorf("overlay %s ships no job spec", ov)
		}
	}
}

// The walk-through of docs/kubernetes.md creates exactly the Secrets the
// manifests use, with the keys precog reads, and applies the overlays that
// exist.
func TestReadmeWalkthroughMatchesManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), kubernetesDoc))
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	for name, keys := range secretKeys {
		i := strings.Index(section, "create secret generic "+name)
		if i < 0 {
			t.Errorf(kubernetesDoc+": the walk-through never creates Secret %s", name)
			continue
		}
		line, _, _ := strings.Cut(section[i:], "\n")
		for _, k := range keys {
			if !strings.Contains(line, k) {
				t.Errorf(kubernetesDoc+": Secret %s is created without key %s", name, k)
			}
		}
	}
	for _, ov := range overlays {
		if !strings.Contains(section, "kubectl apply -k deploy/k8s/overlays/"+ov) {
			t.Errorf(kubernetesDoc+": the walk-through never applies overlays/%s", ov)
		}
	}
	for _, w := range workers(t, render(t, "gpu")) {
		if !strings.Contains(section, w.dep.Name) {
			t.Errorf(kubernetesDoc+": the walk-through never mentions worker pool %s", w.dep.Name)
		}
	}
}

// kubernetesDoc is the walk-through the tests below hold to the manifests.
const kubernetesDoc = "docs/kubernetes.md"

// The walk-through's own overlay (step 1: an images: entry, applied with
// kubectl alone) renders with the kubectl this test uses, and every
// container of every Deployment then runs an image of the registry it names.
func TestReadmeImagesOverlay(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), kubernetesDoc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "Create `deploy/k8s/overlays/prod/kustomization.yaml`:\n\n```yaml\n")
	if !ok {
		t.Fatal(kubernetesDoc + ": no kustomization.yaml of an overlay of one's own (images:) in the Kubernetes walk-through")
	}
	body, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal(kubernetesDoc + ": unterminated yaml block")
	}
	if strings.Contains(string(data), "kustomize edit") {
		t.Error(kubernetesDoc + ": `kustomize edit` needs a kustomize binary that kubectl users do not have")
	}
	dir, err := os.MkdirTemp("overlays", "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var images int
	for _, d := range ofKind[appsv1.Deployment](render(t, filepath.Base(dir))) {
		for _, c := range d.Spec.Template.Spec.Containers {
			images++
			if !strings.HasPrefix(c.Image, "REGISTRY/precog") || !strings.HasSuffix(c.Image, ":TAG") {
				t.Errorf(kubernetesDoc+" overlay: %s/%s runs image %q, not the overlay's REGISTRY/…:TAG", d.Name, c.Name, c.Image)
			}
		}
	}
	if images == 0 {
		t.Fatal(kubernetesDoc + " overlay renders no Deployment")
	}
}
