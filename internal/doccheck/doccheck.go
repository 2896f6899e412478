// Package doccheck reads the repository's Markdown the way GitHub renders
// it, so that tests can keep the documentation true: the relative links of
// every page and the anchors they point to (CheckLinks), and the shell
// commands of its sh blocks (Commands), which the tests check against the
// command line and scripts/try.sh.
//
// It understands the Markdown this repository writes, not all of
// CommonMark: fenced code blocks, ATX headings, inline links and images,
// reference definitions, code spans, and <a id> / <a name> anchors.
package doccheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// A Link is the destination of a Markdown link or image, with its line.
type Link struct {
	Line int
	Dest string
}

// A Command is one simple command of a shell block: its words, with the
// leading environment assignments (NAME=value) and any trailing & left out.
type Command struct {
	Line  int
	Words []string
}

// line is one line of a Markdown file outside or inside a fenced block.
type line struct {
	n     int    // 1-based
	text  string // the line itself
	fence string // the info string of the fenced block it is in ("" outside; "-" for a block without one)
}

// lines splits src into lines and marks those inside fenced code blocks;
// the fence lines themselves are left out.
func lines(src []byte) []line {
	var out []line
	var open string // the opening fence's run of ` or ~, "" outside a block
	var info string
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		indent := len(text) - len(trimmed)
		if run := fenceRun(trimmed); run != "" && indent <= 3 {
			switch {
			case open == "":
				open, info = run, strings.TrimSpace(trimmed[len(run):])
				if info == "" {
					info = "-"
				}
				continue
			case run[0] == open[0] && len(run) >= len(open) && strings.TrimSpace(trimmed[len(run):]) == "":
				open, info = "", ""
				continue
			}
		}
		out = append(out, line{n: n, text: text, fence: info})
	}
	return out
}

// fenceRun returns the run of three or more backticks or tildes s starts
// with, or "".
func fenceRun(s string) string {
	if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	i := 0
	for i < len(s) && s[i] == s[0] {
		i++
	}
	if i < 3 {
		return ""
	}
	return s[:i]
}

// blankCodeSpans replaces every code span of s with x's of the same length,
// so that no link or heading markup is seen inside one. A span opens with a
// run of backticks and closes at the next run of exactly as many.
func blankCodeSpans(s string) string {
	b := []byte(s)
	// run returns the index just past the run of backticks at i.
	run := func(i int) int {
		for i < len(b) && b[i] == '`' {
			i++
		}
		return i
	}
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		open := run(i)
		end := -1
		for k := open; k < len(b); k++ {
			if b[k] != '`' {
				continue
			}
			m := run(k)
			if m-k == open-i {
				end = m
				break
			}
			k = m - 1
		}
		if end < 0 {
			i = open
			continue
		}
		for k := i; k < end; k++ {
			b[k] = 'x'
		}
		i = end
	}
	return string(b)
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// Links returns the destinations of the links and images of a Markdown
// file, outside code blocks and code spans.
func Links(src []byte) []Link {
	var out []Link
	for _, l := range lines(src) {
		if l.fence != "" {
			continue
		}
		text := blankCodeSpans(l.text)
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Line: l.n, Dest: strings.Trim(m[1], "<>")})
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			out = append(out, Link{Line: l.n, Dest: strings.Trim(m[1], "<>")})
		}
	}
	return out
}

// Anchors returns the fragment identifiers GitHub gives a Markdown file:
// one per heading (a repeated one gets -1, -2, …) and one per <a id> or
// <a name>.
func Anchors(src []byte) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range lines(src) {
		if l.fence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		slug := Slug(headingText(m[2]))
		if k := seen[slug]; k > 0 {
			out[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// headingText is the text a heading renders as: links become their text,
// code spans and emphasis lose their markers.
func headingText(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	return strings.NewReplacer("`", "", "**", "", "*", "").Replace(s)
}

// Slug is GitHub's anchor for a heading's text: lower case, spaces become
// hyphens, and every character but letters, digits, marks, hyphens and
// underscores is dropped.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// CheckLinks checks every relative link of every Markdown file under root
// (the repository): the file or folder it names exists inside root, and its
// #fragment, in a Markdown file, is one of that file's anchors. It skips
// hidden folders, testdata, node_modules and the folders .gitignore anchors
// at the root (/bin/, /results/: build and run outputs).
func CheckLinks(root string) ([]error, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	skip := ignoredDirs(root)
	anchors := map[string]map[string]bool{} // by absolute path
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = Anchors(src)
		return anchors[path], nil
	}
	var problems []error
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || skip[path]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, l := range Links(src) {
			if err := checkLink(root, path, l.Dest, anchorsOf); err != nil {
				problems = append(problems, fmt.Errorf("%s:%d: link %s: %w", rel, l.Line, l.Dest, err))
			}
		}
		return nil
	})
	return problems, err
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// checkLink checks one destination of the Markdown file at from.
func checkLink(root, from, dest string, anchorsOf func(string) (map[string]bool, error)) error {
	if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return nil // another site
	}
	path, frag, _ := strings.Cut(dest, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return err
	}
	target := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			target = filepath.Join(root, filepath.FromSlash(path))
		} else {
			target = filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
		}
		if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return errors.New("points outside the repository")
		}
		if _, err := os.Stat(target); err != nil {
			return errors.New("no such file or folder")
		}
	}
	if frag == "" || !strings.HasSuffix(target, ".md") {
		return nil
	}
	a, err := anchorsOf(target)
	if err != nil {
		return err
	}
	if !a[frag] {
		return fmt.Errorf("no heading with the anchor #%s in %s", frag, filepath.Base(target))
	}
	return nil
}

// ignoredDirs returns the folders that root's .gitignore names from the
// root (lines like /results/).
func ignoredDirs(root string) map[string]bool {
	out := map[string]bool{}
	src, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(src), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "/") && strings.HasSuffix(l, "/") && len(l) > 2 {
			out[filepath.Join(root, filepath.FromSlash(strings.Trim(l, "/")))] = true
		}
	}
	return out
}

// Commands returns the simple commands of the sh blocks of a Markdown file
// (```sh, ```bash or ```shell): lines continued with a backslash are
// joined, comments dropped, and a line holding several commands (;, &&,
// ||, |, &) gives each.
func Commands(src []byte) ([]Command, error) {
	var out []Command
	ls := lines(src)
	for i := 0; i < len(ls); i++ {
		switch ls[i].fence {
		case "sh", "bash", "shell":
		default:
			continue
		}
		start, text := ls[i].n, ls[i].text
		for strings.HasSuffix(text, `\`) && i+1 < len(ls) && ls[i+1].fence == ls[i].fence {
			i++
			text = strings.TrimSuffix(text, `\`) + " " + ls[i].text
		}
		cmds, err := Split(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		for _, words := range cmds {
			out = append(out, Command{Line: start, Words: words})
		}
	}
	return out, nil
}

// A PageCommand is a Command of one page of the user documentation.
type PageCommand struct {
	Page string // the page's path, as under root
	Command
}

// DocCommands returns the commands of the sh blocks of the user
// documentation under root: README.md and docs/*.md.
func DocCommands(root string) ([]PageCommand, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	var out []PageCommand
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		cmds, err := Commands(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", page, err)
		}
		rel, err := filepath.Rel(root, page)
		if err != nil {
			return nil, err
		}
		for _, c := range cmds {
			out = append(out, PageCommand{Page: filepath.ToSlash(rel), Command: c})
		}
	}
	return out, nil
}

// Split splits one line of shell into its simple commands and each into its
// words, as a POSIX shell does without expanding anything: single and
// double quotes and backslashes are removed, $VAR stays as written, a # at
// the start of a word begins a comment, and ;, &, |, && and || separate
// commands. Leading NAME=value assignments are left out of each command.
func Split(s string) ([][]string, error) {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		for len(words) > 0 && assignment.MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			endCmd()
			return cmds, nil
		case c == ';' || c == '&' || c == '|':
			endCmd()
		case c == '\\':
			if i+1 < len(s) {
				i++
				w.WriteByte(s[i])
			}
			inWord = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf(`unterminated " in %q`, s)
			}
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds, nil
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
