package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/pluginhost"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/sdk"
)

// hints are the lines Main prints after an error to say what to do about
// it, when the error is one a new user meets first: a backend that cannot
// run here (above all the default, cuda, on a machine without a GPU) and a
// checkpoint folder without safetensors files. Other errors have none.
func hints(cmd *cobra.Command, err error) []string {
	if cmd == nil || err == nil {
		return nil
	}
	var out []string
	if h := backendHint(cmd, err); h != "" {
		out = append(out, h)
	}
	if h := pickleCheckpointHint(err); h != "" {
		out = append(out, h)
	}
	return out
}

// backendHint explains a backend that is unavailable or not installed: how
// the backend was chosen, which backends are installed, and how to choose
// one. A plugin that crashed or failed to start (*pluginhost.ExitError,
// *sdk.TransportError, both ErrUnavailable too) gets no hint: its own log
// lines explain it, and another backend is not the answer to a crash.
func backendHint(cmd *cobra.Command, err error) string {
	f := cmd.Flags().Lookup("backend")
	if f == nil {
		return ""
	}
	var te *sdk.TransportError
	var xe *pluginhost.ExitError
	if errors.As(err, &te) || errors.As(err, &xe) ||
		!errors.Is(err, sdk.ErrUnavailable) && !errors.Is(err, pluginhost.ErrPluginNotFound) {
		return ""
	}
	name := f.Value.String()
	var b strings.Builder
	switch {
	case f.Changed:
		fmt.Fprintf(&b, "the backend %q was chosen with --backend", name)
	case strings.TrimSpace(os.Getenv(envBackend)) != "":
		fmt.Fprintf(&b, "the backend %q was chosen by $%s", name, envBackend)
	default:
		fmt.Fprintf(&b, "the backend %q is the default: neither --backend nor $%s is set", name, envBackend)
	}
	pluginDir := ""
	if pd := cmd.Flags().Lookup("plugin-dir"); pd != nil {
		pluginDir = pd.Value.String()
	}
	installed := installedBackends(pluginhost.SearchDirs(pluginhost.Options{PluginDir: pluginDir}))
	if others := slices.DeleteFunc(slices.Clone(installed), func(s string) bool { return s == name }); len(others) > 0 {
		fmt.Fprintf(&b, "; installed backends: %s", strings.Join(installed, ", "))
	} else if len(installed) == 0 {
		b.WriteString("; no backend is installed (make build puts them in bin/)")
	}
	fmt.Fprintf(&b, "; choose one with --backend NAME or %s=NAME", envBackend)
	if slices.Contains(installed, "mock") && name != "mock" {
		b.WriteString(" (--backend mock runs without a GPU)")
	}
	return b.String()
}

// installedBackends lists the backend names of the executable
// wcache-backend-* files in dirs, sorted, without duplicates. It only
// lists: Resolve still checks a plugin before it runs.
func installedBackends(dirs []string) []string {
	var out []string
	for _, dir := range dirs {
		matches, _ := filepath.Glob(filepath.Join(dir, pluginhost.BinaryPrefix+"*"))
		for _, m := range matches {
			name := strings.TrimPrefix(filepath.Base(m), pluginhost.BinaryPrefix)
			if pluginhost.ValidateName(name) != nil || slices.Contains(out, name) {
				continue
			}
			if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// pickleCheckpointHint explains a folder without safetensors files that
// holds pickled PyTorch weights (pytorch_model.bin and kin): wcache does
// not read them, and this is how to convert them once.
func pickleCheckpointHint(err error) string {
	var fe *safetensors.FormatError
	if !errors.As(err, &fe) || !errors.Is(fe.Err, safetensors.ErrNoFiles) || fe.Path == "" {
		return ""
	}
	dir := fe.Path
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = filepath.Dir(dir) // an index that names no shard
	}
	var found []string
	// The weight files of a PyTorch checkpoint saved without safetensors.
	for _, p := range []string{"*.bin", "*.pt", "*.pth", "*.ckpt"} {
		m, _ := filepath.Glob(filepath.Join(dir, p))
		for _, f := range m {
			found = append(found, filepath.Base(f))
		}
	}
	if len(found) == 0 {
		return ""
	}
	slices.Sort(found)
	if len(found) > 3 {
		found = append(found[:3], "…")
	}
	return fmt.Sprintf("%s holds %s: PyTorch pickle checkpoints are not read (loading one can run arbitrary code, "+
		"and its layout is not known without loading it); download the model's *.safetensors files instead if it has "+
		"them, or convert it once: python3 -c \"import transformers as t; "+
		"t.AutoModelForCausalLM.from_pretrained('%s', torch_dtype='auto').save_pretrained('%s-safetensors', safe_serialization=True)\"",
		dir, strings.Join(found, ", "), dir, strings.TrimSuffix(dir, "/"))
}
