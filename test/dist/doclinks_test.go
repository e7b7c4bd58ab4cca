package dist

import (
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// docPages are the Markdown pages whose relative links must resolve: the
// README and every page of docs/.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

// TestDocLinksResolve: every relative link of README.md and docs/*.md names
// a file or folder of the repository, and its #anchor, when it has one, a
// heading of the Markdown page it names (GitHub's anchor rule).
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	for _, v := range danglingLinks(docPages(t, root), root) {
		t.Error(v)
	}
}

// TestDocLinksCatchADanglingLink plants a page with a link to a missing
// file, one to a missing heading and one good of each, and requires the
// check to name exactly the two bad ones.
func TestDocLinksCatchADanglingLink(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "a.md")
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.md", "# B page\n\n## Who may do what\n")
	write("a.md", "See [b](b.md#who-may-do-what), [top](#a-page), [gone](gone.md),\n"+
		"[no heading](b.md#nowhere) and [web](https://example.com/x.md).\n\n# A page\n\n"+
		"```\n[in code](never.md)\n```\n")
	got := danglingLinks([]string{page}, dir)
	want := []string{
		"a.md:1: gone.md: no such file",
		`a.md:2: b.md#nowhere: no heading "nowhere" in b.md`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("planted violations reported as %q, want %q", got, want)
	}
}

// mdLink matches an inline Markdown link or image target: ](target) or
// ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// danglingLinks returns "page:line: target: why" for each relative link of
// pages (outside fenced code blocks and inline code) whose file is missing
// under root, or whose anchor is no heading of the Markdown page it names.
// Links with a scheme (https:, mailto:) are not checked.
func danglingLinks(pages []string, root string) []string {
	var out []string
	anchors := map[string]map[string]bool{}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", rel(root, page), err))
			continue
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(stripInlineCode(line), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				where := fmt.Sprintf("%s:%d: %s", rel(root, page), i+1, target)
				if _, err := os.Stat(path); err != nil {
					out = append(out, where+": no such file")
					continue
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if anchors[path] == nil {
					anchors[path] = headingAnchors(path)
				}
				if !anchors[path][anchor] {
					out = append(out, fmt.Sprintf("%s: no heading %q in %s", where, anchor, rel(root, path)))
				}
			}
		}
	}
	return out
}

// proseLines yields the lines of the Markdown text with their index (from
// 0), but for fenced code blocks: the fence lines (```, indented or not)
// and every line between an opening and a closing one. An unclosed fence
// hides the rest of the text.
func proseLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fenced := false
		for i, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if !fenced && !yield(i, line) {
				return
			}
		}
	}
}

// inlineCode matches a `code span`, whose brackets are no link.
var inlineCode = regexp.MustCompile("`[^`]*`")

func stripInlineCode(line string) string { return inlineCode.ReplaceAllString(line, "``") }

// htmlAnchor matches an explicit anchor: <a id="name"> or <a name="name">.
var htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)

// headingAnchors returns the anchors GitHub gives the headings of the
// Markdown file at path: lowercased, letters, digits, - and _ kept,
// other symbols dropped, spaces turned to -, a repeated anchor suffixed -1, -2, ….
func headingAnchors(path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, line := range proseLines(string(b)) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchor := a.String()
		for n, base := 1, anchor; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", base, n)
		}
		out[anchor] = true
	}
	return out
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

// docPath matches a repository path to a page of docs/ as code and
// comments write it: docs/NAME.md.
var docPath = regexp.MustCompile(`\bdocs/[A-Za-z0-9_-]+\.md\b`)

// TestDocPathsInSourcesExist: every docs/NAME.md that a source file,
// script, build file or Markdown page outside docs/ names exists, so a
// merged or renamed page leaves no comment, error message or help text
// pointing nowhere. Tests are skipped: they may name a hypothetical page.
func TestDocPathsInSourcesExist(t *testing.T) {
	root := repoRoot(t)
	for _, v := range missingDocPaths(t, root) {
		t.Error(v)
	}
}

// TestDocPathsCatchAMissingPage plants a source naming a page that does
// not exist beside one that does.
func TestDocPathsCatchAMissingPage(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"docs/real.md":  "# Real\n",
		"pkg/a.go":      "// See docs/real.md and docs/gone.md.\npackage a\n",
		"pkg/a_test.go": "// docs/hypothetical.md is a test's own.\npackage a\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := missingDocPaths(t, dir)
	want := []string{"pkg/a.go:1: docs/gone.md: no such file"}
	if !slices.Equal(got, want) {
		t.Errorf("planted violation reported as %q, want %q", got, want)
	}
}

// skippedDirs are folders that hold no project source: build output,
// environments and version control.
var skippedDirs = map[string]bool{".git": true, "bin": true, "dist": true, "bench-results": true,
	".venv": true, "node_modules": true, "__pycache__": true}

// sourceExts are the kinds of file whose docs/ paths are checked.
var sourceExts = []string{".go", ".py", ".sh", ".proto", ".toml", ".yaml", ".yml", ".tmpl", ".md", ".c", ".h"}

// missingDocPaths returns "file:line: docs/NAME.md: no such file" for each
// page named under root (outside docs/ and tests) that does not exist.
func missingDocPaths(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if skippedDirs[name] || path == filepath.Join(root, "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, "_test.go") ||
			!(name == "Makefile" || slices.ContainsFunc(sourceExts, func(e string) bool { return strings.HasSuffix(name, e) })) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, p := range docPath.FindAllString(line, -1) {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					out = append(out, fmt.Sprintf("%s:%d: %s: no such file", rel(root, path), i+1, p))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
