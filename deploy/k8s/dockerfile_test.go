package k8s_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerfile is a Dockerfile's instructions, continuation lines joined.
func dockerfile(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

var makeORTVersion = regexp.MustCompile(`(?m)^ORT_VERSION\s*\?=\s*(\S+)`)

// No Docker engine runs here, so the images are checked by reading their
// Dockerfiles: the ONNX Runtime version is the Makefile's, the final stage
// runs as non-root, base images are tagged, and the GPU library's tarball
// is verified against the required sha256.
func TestDockerfiles(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := makeORTVersion.FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no ORT_VERSION")
	}
	for _, name := range []string{"Dockerfile", "Dockerfile.gpu"} {
		ins := dockerfile(t, name)
		if !contains(ins, "ARG ORT_VERSION="+string(m[1])) {
			t.Errorf("%s: ARG ORT_VERSION is not the Makefile's %s", name, m[1])
		}
		var user string
		args := map[string]string{}
		for _, in := range ins {
			if a, ok := strings.CutPrefix(in, "ARG "); ok {
				if k, v, ok := strings.Cut(a, "="); ok {
					args["${"+k+"}"] = v
				}
			}
			if from, ok := strings.CutPrefix(in, "FROM "); ok {
				img := strings.Fields(from)[0]
				for k, v := range args {
					img = strings.ReplaceAll(img, k, v)
				}
				if !strings.Contains(img, ":") || strings.HasSuffix(img, ":latest") {
					t.Errorf("%s: base image %s has no fixed tag", name, img)
				}
				user = ""
			}
			if u, ok := strings.CutPrefix(in, "USER "); ok {
				user = u
			}
		}
		if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
			t.Errorf("%s: the final stage runs as %q, want a non-root USER", name, user)
		}
	}
	checkORTPins(t, string(m[1]))
}

var (
	scriptSum  = regexp.MustCompile(`(?m)^(CORE|GPU)_SHA256_(\w+)=([0-9a-f]{64})$`)
	scriptGPU  = regexp.MustCompile(`(?m)^GPU_PKG=(\S+)$`)
	scriptGVer = regexp.MustCompile(`(?m)^GPU_VERSION_(\w+)=(\S+)$`)
)

// checkORTPins: both images fetch ONNX Runtime as `make ort` and `make
// ort-gpu` do (scripts/ort.sh): npm pack without install scripts, the same
// package versions, checked against the same pinned sha256 sums; the GPU
// image runs on CUDA 13 with cuDNN 9, which the provider links against.
func checkORTPins(t *testing.T, version string) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "ort.sh"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.ReplaceAll(version, ".", "_")
	sums := map[string]string{}
	for _, m := range scriptSum.FindAllStringSubmatch(string(script), -1) {
		if m[2] == key {
			sums[m[1]] = m[3]
		}
	}
	gpuPkg := scriptGPU.FindStringSubmatch(string(script))
	var gpuVer string
	for _, m := range scriptGVer.FindAllStringSubmatch(string(script), -1) {
		if m[1] == key {
			gpuVer = m[2]
		}
	}
	if sums["CORE"] == "" || sums["GPU"] == "" || gpuPkg == nil || gpuVer == "" {
		t.Fatalf("scripts/ort.sh pins no sums or GPU package for ONNX Runtime %s (the Makefile's)", version)
	}
	cpu := strings.Join(dockerfile(t, "Dockerfile"), "\n")
	gpu := strings.Join(dockerfile(t, "Dockerfile.gpu"), "\n")
	for name, wants := range map[string][]string{
		"Dockerfile": {
			"ARG ORT_SHA256=" + sums["CORE"],
			`npm pack --silent --ignore-scripts "onnxruntime-node@${ORT_VERSION}"`,
			`echo "${ORT_SHA256}  onnxruntime-node-${ORT_VERSION}.tgz" | sha256sum -c -`,
		},
		"Dockerfile.gpu": {
			"ARG ORT_SHA256=" + sums["CORE"],
			"ARG ORT_GPU_SHA256=" + sums["GPU"],
			"ARG ORT_GPU_PACKAGE=" + gpuPkg[1] + "@" + gpuVer,
			`npm pack --silent --ignore-scripts "onnxruntime-node@${ORT_VERSION}"`,
			`npm pack --silent --ignore-scripts "${ORT_GPU_PACKAGE}"`,
			`echo "${ORT_SHA256}  onnxruntime-node-${ORT_VERSION}.tgz" | sha256sum -c -`,
			`echo "${ORT_GPU_SHA256}  ${ORT_GPU_PACKAGE/@/-}.tgz" | sha256sum -c -`,
			"libonnxruntime_providers_cuda.so",
			"go run ./scripts/prunefatbin",
			"ARG CUDA_IMAGE=nvidia/cuda:13.",
			"-cudnn-runtime-",
		},
	} {
		text := cpu
		if name == "Dockerfile.gpu" {
			text = gpu
		}
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %s", name, want)
			}
		}
	}
}

// TestDockerfilesCarryLocale: the final stage of each image has the
// en_US.UTF-8 locale, which ONNX Runtime builds for text operators
// (StringNormalizer): without it a string model fails to load.
func TestDockerfilesCarryLocale(t *testing.T) {
	const gen = "localedef -i en_US -c -f UTF-8 en_US.UTF-8"
	for _, name := range []string{"Dockerfile", "Dockerfile.gpu"} {
		ins := dockerfile(t, name)
		last := 0
		for i, in := range ins {
			if strings.HasPrefix(in, "FROM ") {
				last = i
			}
		}
		all, final := strings.Join(ins, "\n"), strings.Join(ins[last:], "\n")
		if !strings.Contains(all, gen) {
			t.Errorf("%s: no stage generates the en_US.UTF-8 locale (%s)", name, gen)
		}
		if !strings.Contains(final, gen) && !strings.Contains(final, "/usr/lib/locale/locale-archive /usr/lib/locale/locale-archive") {
			t.Errorf("%s: the final stage neither generates en_US.UTF-8 nor copies the locale-archive that holds it", name)
		}
	}
}
