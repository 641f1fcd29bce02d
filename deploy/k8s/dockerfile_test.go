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
	gpu := strings.Join(dockerfile(t, "Dockerfile.gpu"), "\n")
	for _, want := range []string{
		"https://github.com/microsoft/onnxruntime/releases/download/v${ORT_VERSION}/onnxruntime-linux-x64-gpu-${ORT_VERSION}.tgz",
		`echo "${ORT_GPU_SHA256}  /tmp/ort.tgz" | sha256sum -c -`,
		`if [ -z "${ORT_GPU_SHA256}" ]`,
	} {
		if !strings.Contains(gpu, want) {
			t.Errorf("Dockerfile.gpu lacks %s", want)
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
