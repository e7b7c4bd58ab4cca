// Package hubcache resolves Hugging Face hub ids ("org/name",
// "org/name@revision"), as vLLM and SGLang users pass them to --model, to a
// snapshot directory of the local hub cache, without network:
//
//	<cache>/models--<org>--<name>/snapshots/<commit>/
//	<cache>/models--<org>--<name>/refs/<revision>   (a file holding <commit>)
//
// where <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (the order
// huggingface_hub uses). The snapshot's files are symlinks into blobs/,
// which the daemon and clients follow like any file.
package hubcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultRevision is the revision of an id without "@".
const DefaultRevision = "main"

// ErrNotCached is matched by every *NotCachedError.
var ErrNotCached = errors.New("model not in the local Hugging Face cache")

// NotCachedError says where Resolve looked for a hub id.
type NotCachedError struct {
	ID, Revision string
	// Looked lists the paths tried, in order.
	Looked []string
	Why    string
	// LocalDir, when not "", is the directory of the same spelling in the
	// working directory, which a hub id never names ("./" + the spelling
	// does).
	LocalDir string
}

func (e *NotCachedError) Error() string {
	msg := fmt.Sprintf("%s@%s is a Hugging Face hub id that is not in the local cache (%s; looked at %s); "+
		"download it first (e.g. huggingface-cli download %s)", e.ID, e.Revision, e.Why, strings.Join(e.Looked, ", "), e.ID)
	if e.LocalDir != "" {
		return msg + fmt.Sprintf(", or pass ./%s to load the directory of that name here (a hub id never names a relative directory)", e.LocalDir)
	}
	return msg + " or pass a directory"
}

// Is matches ErrNotCached.
func (e *NotCachedError) Is(target error) bool { return target == ErrNotCached }

// IsID reports whether model has the form of a hub id ("org/name" with an
// optional "@revision"), whatever exists on disk.
func IsID(model string) bool {
	id, rev, _ := strings.Cut(model, "@")
	return isRepoID(id) && (!strings.Contains(model, "@") || isRevision(rev))
}

// CacheDir is the hub cache directory getenv (os.Getenv when nil) names.
func CacheDir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if d := getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// Resolve returns the directory model names. A model of the form of a hub
// id (IsID: "org/name", "org/name@revision") is a hub id, whatever the
// working directory holds: the snapshot of the id's revision in the local
// hub cache, or a *NotCachedError naming every place looked at (and, when
// a directory of that spelling exists here, that "./org/name" names it).
// So a directory planted in a shared working directory (/tmp) under a
// model's id is never loaded in the model's place. Anything else — an
// absolute path, one starting with "./" or "../", another depth — is a
// path, returned as it is.
func Resolve(model string, getenv func(string) string) (string, error) {
	if !IsID(model) {
		return model, nil
	}
	id, rev, hasRev := strings.Cut(model, "@")
	if !hasRev || rev == "" {
		rev = DefaultRevision
	}
	cache := CacheDir(getenv)
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
	nc := &NotCachedError{ID: id, Revision: rev}
	if isDir(model) {
		nc.LocalDir = model
	}
	snapshots := filepath.Join(repo, "snapshots")
	if isCommit(rev) {
		dir := filepath.Join(snapshots, rev)
		nc.Looked = append(nc.Looked, dir)
		if isDir(dir) {
			return dir, nil
		}
	}
	ref := filepath.Join(repo, "refs", rev)
	nc.Looked = append(nc.Looked, ref)
	b, err := os.ReadFile(ref)
	if err != nil {
		nc.Why = "no such ref"
		if !isDir(repo) {
			nc.Why = "no " + filepath.Base(repo) + " in " + cache
		}
		return "", nc
	}
	commit := strings.TrimSpace(string(b))
	if !isCommit(commit) {
		nc.Why = fmt.Sprintf("%s holds %q, not a commit", ref, commit)
		return "", nc
	}
	dir := filepath.Join(snapshots, commit)
	nc.Looked = append(nc.Looked, dir)
	if !isDir(dir) {
		nc.Why = "the ref names a snapshot that is not there"
		return "", nc
	}
	return dir, nil
}

func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
