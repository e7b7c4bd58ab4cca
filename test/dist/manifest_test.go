package dist

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// container is what the tests read of the wcache container of a shipped
// DaemonSet: its image, command, readiness probe, environment and uid.
type container struct {
	Image     string
	Command   []string
	Probe     []string
	Env       map[string]string
	RunAsUser string
}

// readDaemonSet reads the wcache container of deploy/kubernetes/<name>.
// The manifests are YAML; this reads the few keys it needs line by line
// and requires the command and the probe as one-line JSON arrays (flow
// style), as the manifests say, rather than pulling in a YAML library.
func readDaemonSet(t *testing.T, name string) container {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := container{Env: map[string]string{}}
	var inWcache, inEnv, inProbe bool
	var envName string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, value, _ := strings.Cut(strings.TrimPrefix(line, "- "), ":")
		value = strings.TrimSpace(value)
		switch {
		case line == "- name: wcache":
			inWcache = true
		case !inWcache && key == "runAsUser" && c.RunAsUser == "":
			c.RunAsUser = value
		case !inWcache:
		case key == "image":
			c.Image = value
		case key == "env":
			inEnv = true
		case key == "readinessProbe":
			inEnv, inProbe = false, true
		case inEnv && key == "name":
			envName = value
		case inEnv && key == "value":
			c.Env[envName] = value
		case key == "command":
			var args []string
			if err := json.Unmarshal([]byte(value), &args); err != nil {
				t.Fatalf("%s: command is not a one-line JSON array: %q: %v", name, value, err)
			}
			if inProbe {
				c.Probe = args
				inProbe = false
			} else {
				c.Command = args
			}
		case key == "securityContext", key == "volumeMounts":
			inEnv = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if c.Image == "" || len(c.Command) == 0 || len(c.Probe) == 0 || c.RunAsUser == "" {
		t.Fatalf("%s: could not read the wcache container: %+v", name, c)
	}
	return c
}
