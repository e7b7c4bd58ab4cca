package pluginhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// ValidateName checks a backend name: 1 to 64 characters from [a-z0-9-],
// so that it can never name a path outside the plugin folders.
func ValidateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w %q: want 1 to 64 characters", ErrInvalidName, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("%w %q: use only lowercase letters, digits and '-'", ErrInvalidName, name)
		}
	}
	return nil
}

// SearchDirs returns the folders Resolve searches, in order, without
// duplicates: opts.PluginDir, $WCACHE_PLUGIN_DIR, the folder of the running
// executable, SystemPluginDir. Relative folders are made absolute.
func SearchDirs(opts Options) []string {
	opts = opts.withDefaults()
	var dirs []string
	add := func(d string) {
		if d == "" {
			return
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	add(opts.PluginDir)
	add(opts.Getenv(EnvPluginDir))
	if exe, err := os.Executable(); err == nil {
		add(filepath.Dir(exe))
	}
	add(SystemPluginDir)
	return dirs
}

// Resolve finds the binary wcache-backend-NAME in SearchDirs(opts) and
// returns its real path (symlinks resolved). The first folder that has the
// file wins; the file must pass the security checks (see checkPlugin) or
// Resolve fails with *InsecurePluginError rather than trying further
// folders. Nothing found is *NotFoundError listing every folder searched.
func Resolve(name string, opts Options) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	binary := BinaryPrefix + name
	dirs := SearchDirs(opts)
	for _, dir := range dirs {
		candidate := filepath.Join(dir, binary)
		if _, err := os.Lstat(candidate); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("inspect backend plugin %s: %w", candidate, err)
		}
		real, err := checkPlugin(candidate)
		if err != nil {
			return "", err
		}
		return real, nil
	}
	return "", &NotFoundError{Name: name, Binary: binary, Searched: dirs}
}
