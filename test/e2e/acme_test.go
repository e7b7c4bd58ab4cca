package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
	"github.com/wcache/wcache/test/testproc"
)

// The outside plugin of test/e2e/testdata/acme: a separate Go module
// (its own go.mod, a replace directive to this repository) that imports the
// sdk alone, declares the vendor handle kind x-acme-buf, an option schema
// and backend API versions 1 and 2.
const (
	acmeKind       = "x-acme-buf"
	acmeDataPrefix = "acme-buf:v1:"
)

// acmeMapper is the vendor's Go mapper for x-acme-buf, as acme would ship
// it to Go clients: Data is the prefix and the path of a file holding the
// buffer, mapped read-only.
func acmeMapper(h client.Handle) (client.Mapping, error) {
	path, ok := strings.CutPrefix(string(h.Data), acmeDataPrefix)
	if !ok {
		return client.Mapping{}, fmt.Errorf("not an %s handle", acmeKind)
	}
	data, err := client.MapShm(path, h.Size)
	if err != nil {
		return client.Mapping{}, err
	}
	return client.Mapping{Data: data, Release: func() error { return client.Unmap(data) }}, nil
}

// acmeMappers is the Go client's default registry plus acme's mapper.
func acmeMappers(t *testing.T) *client.Mappers {
	t.Helper()
	reg := client.DefaultMappers()
	if err := reg.Register(acmeKind, client.MapperFunc(acmeMapper)); err != nil {
		t.Fatal(err)
	}
	return reg
}

// buildAcme builds the outside plugin as a module of its own, offline: the
// modules come from the cache that building this repository filled
// (GOPROXY=off). It builds a copy: the committed go.mod pins what this
// repository required when it was written, and the copy's requirements
// are brought up to this checkout's (GOFLAGS=-mod=mod, go.sum from the
// repository), as an outside author does after `go get` of a new wcache
// release, so that a dependency bump here does not break the test.
func buildAcme(t *testing.T) string {
	t.Helper()
	root, err := testproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "test", "e2e", "testdata", "acme")
	dst := filepath.Join(t.TempDir(), "acme")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	const replace = "replace github.com/wcache/wcache => ../../../.."
	if !strings.Contains(string(gomod), replace) {
		t.Fatalf("%s/go.mod lacks %q", src, replace)
	}
	// The module and go lines as committed; the requirements from this
	// checkout (the committed ones may name versions it no longer has).
	var head []string
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(line, "module ") || strings.HasPrefix(line, "go ") {
			head = append(head, line)
		}
	}
	gomod = []byte(strings.Join(head, "\n") + "\n\nrequire github.com/wcache/wcache v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/wcache/wcache => " + root + "\n")
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "go.mod"), gomod, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "go.sum"), gosum, 0o600); err != nil {
		t.Fatal(err)
	}
	return backendtest.BuildPluginT(t, "acme", dst, "CGO_ENABLED=0", "GOPROXY=off", "GOFLAGS=-mod=mod")
}

func TestOutsidePluginPassesTheConformanceSuite(t *testing.T) {
	bin := buildAcme(t)
	dir := filepath.Join(t.TempDir(), "acme")
	env := []string{"ACME_DIR=" + dir, "ACME_UUID_TAG=c0f0"}
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		return backendtest.StartPlugin(t, bin, env...)
	}, backendtest.Options{UUIDPrefix: "ACME-", MapHandle: acmeMappers(t).MapSDKHandle})

	t.Run("APIVersions", func(t *testing.T) {
		b, v := backendtest.StartPluginWith(t, bin, backendtest.StartOptions{Env: env})
		if v != sdk.APIVersion {
			t.Errorf("a current host and acme settled on API version %d, want %d", v, sdk.APIVersion)
		}
		opts, err := sdk.OptionsOf(t.Context(), b)
		if err != nil || len(opts) != 4 {
			t.Fatalf("options over version %d: %v, %v", v, opts, err)
		}
		// A host of the previous release speaks only version 1: the same
		// binary serves it, without Configure and without options.
		old, v := backendtest.StartPluginWith(t, bin, backendtest.StartOptions{Env: env, APIVersions: []int{1}})
		if v != 1 {
			t.Fatalf("a version-1 host settled on %d", v)
		}
		if devs, err := old.Devices(t.Context()); err != nil || len(devs) != 1 || devs[0].UUID != "ACME-c0f0-0000" {
			t.Fatalf("Devices over version 1: %v, %v", devs, err)
		}
	})
}

func TestOutsidePluginServesAnAttachThroughItsMapper(t *testing.T) {
	bin := buildAcme(t)
	tag := fmt.Sprintf("%08x", uint32(time.Now().UnixNano())^uint32(os.Getpid())<<8)
	h := newHarness(t, harnessOptions{Devices: 1, Env: []string{"WCACHE_PLUGIN_DIR=" + filepath.Dir(bin)}})
	acmeDir := filepath.Join(h.Root, "acme")
	opts := []string{"--backend", "acme", "--backend-opt", "dir=" + acmeDir, "--backend-opt", "uuid-tag=" + tag}
	uuid := "ACME-" + tag + "-0000"

	t.Run("Describe", func(t *testing.T) {
		res := h.mustRun(append([]string{"devices", "--describe"}, opts...)...)
		for _, want := range []string{"backend acme 1.2.3", "backend API version 2", acmeKind,
			"uuid-tag", "ACME_UUID_TAG", "memory", "256MiB", "ACME_DEVICES"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("devices --describe lacks %q:\n%s", want, res.Stdout)
			}
		}
		res = h.mustRun(append([]string{"devices", "--describe", "--json"}, opts...)...)
		var d struct {
			APIVersion  int      `json:"api_version"`
			HandleKinds []string `json:"handle_kinds"`
			Options     []struct {
				Name, Type, Default, Env string
			} `json:"options"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &d); err != nil {
			t.Fatalf("devices --describe --json: %v\n%s", err, res.Stdout)
		}
		if d.APIVersion != 2 || len(d.HandleKinds) != 1 || d.HandleKinds[0] != acmeKind || len(d.Options) != 4 ||
			d.Options[1].Name != "memory" || d.Options[1].Type != "size" || d.Options[1].Default != "256MiB" || d.Options[1].Env != "ACME_MEMORY" {
			t.Errorf("devices --describe --json = %+v", d)
		}
	})
	t.Run("OptionsWinOverVariables", func(t *testing.T) {
		withEnv := func(c *exec.Cmd) { c.Env = append(c.Env, "ACME_DEVICES=2", "WCACHE_LOG_LEVEL=info") }
		res := h.runWith(withEnv, append([]string{"devices", "--json"}, opts...)...)
		if res.Code != 0 || strings.Count(res.Stdout, `"uuid"`) != 2 {
			t.Fatalf("ACME_DEVICES=2: want 2 devices:\n%s", res)
		}
		// The plugin's uint64 log field reaches the host's log as written.
		if !strings.Contains(res.Stderr, "memory_per_device=268435456") {
			t.Errorf("the plugin's log line lost its field's type:\n%s", res.Stderr)
		}
		res = h.runWith(withEnv, append([]string{"devices", "--json", "--backend-opt", "devices=3"}, opts...)...)
		if res.Code != 0 || strings.Count(res.Stdout, `"uuid"`) != 3 {
			t.Fatalf("--backend-opt devices=3 over ACME_DEVICES=2: want 3 devices:\n%s", res)
		}
	})
	t.Run("UnknownOptionRefused", func(t *testing.T) {
		res := h.run(append([]string{"devices", "--backend-opt", "colour=red"}, opts...)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, `"colour"`) ||
			!strings.Contains(res.Stderr, "known: devices, memory, dir, uuid-tag") {
			t.Fatalf("an unknown option: want exit 2 naming it and the known ones:\n%s", res)
		}
	})

	model := genModel(t, filepath.Join(h.Root, "model"), safetensorstest.GenOptions{Seed: 7})
	serve := h.start(append([]string{"serve", "--gpu-id", "0", "--model", model.Dir}, opts...)...)
	h.waitReady(serve, h.Paths(uuid).Ready)

	att := h.mustAttachGo(uuid, clientConfig(t, model.Dir))
	m := att.Manifest
	if len(m.Handles) == 0 || m.Handles[0].Kind != acmeKind {
		t.Fatalf("manifest handles %+v, want %s", m.Handles, acmeKind)
	}
	// Without acme's mapper the client names the kind and the way out.
	_, err := client.Map(m)
	var nm *client.NotMappableError
	if !errors.As(err, &nm) || nm.Kind != acmeKind || !strings.Contains(err.Error(), "Register") {
		t.Fatalf("Map with the default mappers: %v, want a NotMappableError naming %s and Register", err, acmeKind)
	}
	checkBytesWith(t, acmeMappers(t), m, model, 0)

	// The CLI verifies through the backend (Import + Digest in the plugin).
	h.mustRun(append([]string{"attach", "--gpu-id", "0", "--model", model.Dir, "--verify"}, opts...)...)
}
