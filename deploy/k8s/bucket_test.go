package k8s_test

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/precog-ml/precog/jobs"
)

// The bucket overlay renders with no PersistentVolumeClaim and no pod
// volume backed by shared storage; the pods that read the bucket (workers,
// the scheduler, the API) run as a ServiceAccount carrying the IRSA,
// Workload Identity and Azure Workload Identity annotations; the shipped
// job specs name object-store URLs only; the model cache of workers and
// the API is a mounted emptyDir bounded below its size limit.
func TestBucketOverlay(t *testing.T) {
	objs := render(t, "bucket")
	if pvcs := ofKind[corev1.PersistentVolumeClaim](objs); len(pvcs) > 0 {
		t.Errorf("the bucket overlay renders %d PersistentVolumeClaims (%s…)", len(pvcs), pvcs[0].Name)
	}
	sas := map[string]*corev1.ServiceAccount{}
	for _, sa := range ofKind[corev1.ServiceAccount](objs) {
		sas[sa.Name] = sa
	}
	readers := 0
	for _, d := range ofKind[appsv1.Deployment](objs) {
		pod := d.Spec.Template.Spec
		for _, v := range pod.Volumes {
			if v.EmptyDir == nil && v.ConfigMap == nil && v.Secret == nil && v.Projected == nil {
				t.Errorf("Deployment %s: volume %s is not an emptyDir, ConfigMap, Secret or projected volume", d.Name, v.Name)
			}
		}
		if d.Name == "precog-dashboard" {
			continue // reads the ledger only
		}
		readers++
		sa := sas[pod.ServiceAccountName]
		if sa == nil {
			t.Errorf("Deployment %s runs as ServiceAccount %q, not rendered", d.Name, pod.ServiceAccountName)
			continue
		}
		for _, a := range []string{"eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account", "azure.workload.identity/client-id"} {
			if sa.Annotations[a] == "" {
				t.Errorf("ServiceAccount %s has no %s annotation", sa.Name, a)
			}
		}
		if d.Name == "precog-scheduler" {
			continue // plans from footers; loads no model
		}
		checkObjectCache(t, d)
	}
	if readers < 3 {
		t.Errorf("%d Deployments read the bucket, want the worker, the scheduler and the API", readers)
	}
	anyEnv := func(string) (string, bool) { return "set-by-precog-sinks", true }
	specs := 0
	for _, cm := range ofKind[corev1.ConfigMap](objs) {
		if !strings.HasPrefix(cm.Name, "precog-jobs") {
			continue
		}
		for file, data := range cm.Data {
			specs++
			spec, err := jobs.Parse([]byte(data), "/jobs/"+file, nil, anyEnv)
			if err != nil {
				t.Errorf("job spec %s: %v", file, err)
				continue
			}
			paths := []string{spec.Model.Path}
			if spec.Source.Parquet != nil {
				paths = append(paths, spec.Source.Parquet.Path)
			}
			if spec.Sinks.Parquet != nil {
				paths = append(paths, spec.Sinks.Parquet.Path)
			}
			for _, in := range spec.Model.Inputs {
				if in.Tokenizer != "" {
					paths = append(paths, in.Tokenizer)
				}
			}
			for _, p := range paths {
				if !jobs.IsURL(p) {
					t.Errorf("job spec %s: path %s is not an object-store URL; this overlay mounts no data", file, p)
				}
			}
		}
	}
	if specs == 0 {
		t.Error("the bucket overlay ships no job spec")
	}
}

// checkObjectCache: PRECOG_OBJECT_CACHE_DIR is a mounted emptyDir and the
// cache's byte bound is below the volume's size limit (an emptyDir over its
// limit evicts the pod).
func checkObjectCache(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	dir := env["PRECOG_OBJECT_CACHE_DIR"]
	max, err := strconv.ParseInt(env["PRECOG_OBJECT_CACHE_MAX_BYTES"], 10, 64)
	if dir == "" || err != nil {
		t.Errorf("Deployment %s: PRECOG_OBJECT_CACHE_DIR %q, PRECOG_OBJECT_CACHE_MAX_BYTES %q", d.Name, dir, env["PRECOG_OBJECT_CACHE_MAX_BYTES"])
		return
	}
	var vol string
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir {
			vol = m.Name
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name != vol {
			continue
		}
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Value() <= max {
			t.Errorf("Deployment %s: the object cache (%d bytes) is not an emptyDir with a larger sizeLimit: %+v", d.Name, max, v.VolumeSource)
		}
		return
	}
	t.Errorf("Deployment %s: nothing is mounted at PRECOG_OBJECT_CACHE_DIR %s", d.Name, dir)
}
