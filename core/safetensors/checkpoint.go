package safetensors

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Suffix is the file name suffix of safetensors files.
const Suffix = ".safetensors"

// IsCheckpointFileName reports whether a directory entry named name is a
// file of a checkpoint opened without an index: it ends in ".safetensors"
// and is not hidden (does not start with "."), so that partial downloads
// and editor or tool files such as ".model.safetensors" never count. The
// Python client applies the same rule (docs/cacheconfig.md).
func IsCheckpointFileName(name string) bool {
	return strings.HasSuffix(name, Suffix) && !strings.HasPrefix(name, ".")
}

// Checkpoint is a set of validated safetensors files that together hold one
// model's weights, with no tensor name in two files.
type Checkpoint struct {
	// Dir is the checkpoint directory; for OpenFiles, the directory all the
	// files share, or "" when they are in different directories.
	Dir string
	// Files are sorted by base name.
	Files []*File
	// Index is the parsed model.safetensors.index.json, nil when the
	// checkpoint was opened without one.
	Index *Index
}

// TotalBytes is the sum of the data buffer sizes of all files.
func (c *Checkpoint) TotalBytes() uint64 {
	var n uint64
	for _, f := range c.Files {
		n += f.Header.DataSize()
	}
	return n
}

// NumTensors is the number of tensors over all files.
func (c *Checkpoint) NumTensors() int {
	n := 0
	for _, f := range c.Files {
		n += len(f.Header.Tensors)
	}
	return n
}

// OpenCheckpoint opens the checkpoint in dir.
//
// With a model.safetensors.index.json, exactly the shards its weight_map
// names are opened (other *.safetensors files in dir are ignored); every
// weight it maps must be in the shard it names (ErrMissingTensor), and no
// shard may hold a tensor the index maps to another shard (ErrMisplacedTensor,
// an alias across files). Tensors the index does not mention are allowed.
// Without an index, every *.safetensors entry of dir that is not hidden
// (IsCheckpointFileName) is opened, in name order. Either way each file is validated (see Open), a tensor name in two
// files is ErrDuplicateName, and a checkpoint with no file is ErrNoFiles.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	indexPath := filepath.Join(dir, IndexFileName)
	ix, err := ReadIndex(indexPath)
	switch {
	case err == nil:
		return openIndexed(dir, ix)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open checkpoint: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if IsCheckpointFileName(e.Name()) {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	if len(paths) == 0 {
		return nil, &FormatError{Path: dir, Rule: fmt.Sprintf("no %s and no *%s file in the directory", IndexFileName, Suffix), Err: ErrNoFiles}
	}
	ck, err := openAll(paths)
	if err != nil {
		return nil, err
	}
	ck.Dir = dir
	return ck, nil
}

// openIndexed opens the shards an index names and cross-checks them.
func openIndexed(dir string, ix *Index) (*Checkpoint, error) {
	shards := ix.Shards()
	if len(shards) == 0 {
		return nil, &FormatError{Path: ix.Path, Rule: "weight_map names no shard", Err: ErrNoFiles}
	}
	paths := make([]string, len(shards))
	for i, s := range shards {
		paths[i] = filepath.Join(dir, s)
	}
	ck, err := openAll(paths)
	if err != nil {
		return nil, err
	}
	ck.Dir, ck.Index = dir, ix
	where := make(map[string]*File, len(ix.WeightMap))
	for _, f := range ck.Files {
		shard := filepath.Base(f.Path)
		for _, t := range f.Header.Tensors {
			where[t.Name] = f
			if mapped, ok := ix.WeightMap[t.Name]; ok && mapped != shard {
				return nil, &FormatError{Path: f.Path, Tensor: t.Name,
					Rule: fmt.Sprintf("present in this shard but %s maps it to %s", IndexFileName, mapped), Err: ErrMisplacedTensor}
			}
		}
	}
	names := make([]string, 0, len(ix.WeightMap))
	for name := range ix.WeightMap {
		names = append(names, name)
	}
	slices.Sort(names) // report the first missing weight deterministically
	for _, name := range names {
		if _, ok := where[name]; !ok {
			return nil, &FormatError{Path: filepath.Join(dir, ix.WeightMap[name]), Tensor: name,
				Rule: fmt.Sprintf("%s maps it to this shard, which does not hold it", IndexFileName), Err: ErrMissingTensor}
		}
	}
	return ck, nil
}

// OpenFiles opens an explicit list of safetensors files as one checkpoint,
// for layouts without an index such as per-rank pre-sharded files
// (model-rank-{tp_rank}-part-{i}.safetensors). The list must not be empty
// (ErrNoFiles) nor repeat a base name (ErrDuplicateFile); each file is
// validated (see Open) and a tensor name in two files is ErrDuplicateName.
func OpenFiles(paths []string) (*Checkpoint, error) {
	if len(paths) == 0 {
		return nil, &FormatError{Rule: "no file given", Err: ErrNoFiles}
	}
	ck, err := openAll(paths)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(filepath.Clean(paths[0]))
	for _, p := range paths[1:] {
		if filepath.Dir(filepath.Clean(p)) != dir {
			dir = ""
			break
		}
	}
	ck.Dir = dir
	return ck, nil
}

// openAll opens paths, sorts them by base name and refuses repeated base
// names and tensor names shared by two files.
func openAll(paths []string) (*Checkpoint, error) {
	sorted := slices.Clone(paths)
	slices.SortFunc(sorted, func(a, b string) int { return cmp.Compare(filepath.Base(a), filepath.Base(b)) })
	for i := 1; i < len(sorted); i++ {
		if filepath.Base(sorted[i]) == filepath.Base(sorted[i-1]) {
			return nil, &FormatError{Path: sorted[i], Rule: fmt.Sprintf("same base name as %s", sorted[i-1]), Err: ErrDuplicateFile}
		}
	}
	ck := &Checkpoint{Files: make([]*File, 0, len(sorted))}
	owner := make(map[string]string)
	for _, p := range sorted {
		f, err := Open(p)
		if err != nil {
			return nil, err
		}
		for _, t := range f.Header.Tensors {
			if first, dup := owner[t.Name]; dup {
				return nil, &FormatError{Path: p, Tensor: t.Name, Rule: fmt.Sprintf("also present in %s", first), Err: ErrDuplicateName}
			}
			owner[t.Name] = p
		}
		ck.Files = append(ck.Files, f)
	}
	return ck, nil
}
