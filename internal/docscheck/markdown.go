// Package docscheck reads the repository's Markdown (README.md and docs/)
// so that its tests can hold the docs to the code: every fenced shell block
// is run by a test or says why not, and every relative link resolves.
package docscheck

import (
	"regexp"
	"strconv"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	Line int    // of the opening fence, 1-based
	Lang string // the info string's first word, "" when none
	Text string // the lines between the fences
	// Marked: the line before the fence is a "not run in tests" marker,
	// whose reason is Reason.
	Marked bool
	Reason string
}

// markerRE is the convention for a block no test runs: an HTML comment on
// the line right before the fence, with a reason.
var markerRE = regexp.MustCompile(`^<!-- not run in tests: (.*?) -->$`)

// Shell reports whether the block holds commands a reader would type, the
// blocks the docs test holds to account. An unlabelled block counts, so
// that leaving out the language does not leave out the check.
func (b Block) Shell() bool {
	switch b.Lang {
	case "", "sh", "bash", "shell", "console", "shell-session":
		return true
	}
	return false
}

// Blocks returns the fenced code blocks of src, nested in lists or not.
func Blocks(src string) []Block {
	var out []Block
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		b := Block{Line: i + 1, Lang: firstWord(info)}
		if prev := previousNonBlank(lines, i); prev >= 0 {
			if m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[prev])); m != nil {
				b.Marked, b.Reason = true, strings.TrimSpace(m[1])
			}
		}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), fence); i++ {
			body = append(body, lines[i])
		}
		b.Text = strings.Join(body, "\n")
		out = append(out, b)
	}
	return out
}

func openFence(line string) (fence, info string, ok bool) {
	t := strings.TrimSpace(line)
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, f) {
			return f, strings.TrimLeft(t, f[:1]), true
		}
	}
	return "", "", false
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func previousNonBlank(lines []string, i int) int {
	for j := i - 1; j >= 0; j-- {
		if strings.TrimSpace(lines[j]) != "" {
			return j
		}
	}
	return -1
}

// Prose returns src without its fenced blocks and inline code spans, the
// text whose links count; line numbers hold.
func Prose(src string) string {
	lines := strings.Split(withoutFences(src), "\n")
	for i, l := range lines {
		lines[i] = codeSpanRE.ReplaceAllString(l, "``")
	}
	return strings.Join(lines, "\n")
}

// withoutFences blanks src's fenced blocks, keeping line numbers.
func withoutFences(src string) string {
	lines := strings.Split(src, "\n")
	in, fence := false, ""
	for i, l := range lines {
		if in {
			if strings.HasPrefix(strings.TrimSpace(l), fence) {
				in = false
			}
			lines[i] = ""
			continue
		}
		if f, _, ok := openFence(l); ok {
			in, fence, lines[i] = true, f, ""
		}
	}
	return strings.Join(lines, "\n")
}

var codeSpanRE = regexp.MustCompile("`[^`]*`")

// Commands returns the commands of a shell block: in a console block the
// lines after a "$ " prompt (the rest is output), in others every line
// that is not a comment; continuation lines joined, here-documents and
// trailing comments dropped, and lists split on &&, || and ; so each
// command stands alone.
func Commands(b Block) []string {
	var out []string
	lines := strings.Split(b.Text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if b.Lang == "console" || b.Lang == "shell-session" {
			rest, ok := strings.CutPrefix(line, "$ ")
			if !ok {
				continue
			}
			line = rest
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if m := heredocRE.FindStringSubmatch(line); m != nil {
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != m[1] {
				i++
			}
			i++ // the terminator
		}
		for _, c := range splitList(stripComment(line)) {
			c = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(c), "&"))
			if c != "" {
				out = append(out, strings.Join(strings.Fields(c), " "))
			}
		}
	}
	return out
}

var heredocRE = regexp.MustCompile(`<<-?\s*['"]?(\w+)['"]?`)

// stripComment cuts a " # comment" that is outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		if quoted(&quote, s[i]) {
			continue
		}
		if s[i] == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

// quoted steps the shell's quoting over c (quote: the open quote mark, or
// 0) and reports whether c is a quote mark or inside quotes, where it
// neither comments nor separates. Quote marks are ASCII, so stepping over
// bytes never splits a character that matters.
func quoted(quote *byte, c byte) bool {
	switch {
	case *quote != 0:
		if c == *quote {
			*quote = 0
		}
		return true
	case c == '\'' || c == '"':
		*quote = c
		return true
	}
	return false
}

// splitList splits a command list on &&, || and ; outside quotes.
func splitList(s string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quoted(&quote, c) {
			continue
		}
		switch {
		case c == ';':
			out, start = append(out, s[start:i]), i+1
		case (c == '&' || c == '|') && i+1 < len(s) && s[i+1] == c:
			out, start = append(out, s[start:i]), i+2
			i++
		}
	}
	return append(out, s[start:])
}

// Link is a Markdown link or image in prose.
type Link struct {
	Line   int
	Target string
}

var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// Links returns the links of src's prose.
func Links(src string) []Link {
	var out []Link
	for i, l := range strings.Split(Prose(src), "\n") {
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			out = append(out, Link{Line: i + 1, Target: m[1]})
		}
	}
	return out
}

var headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// Anchors returns the anchors GitHub gives src's headings: lower case,
// punctuation dropped, spaces as hyphens, "-1", "-2" on repeats.
func Anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(withoutFences(src), "\n") {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Slug is GitHub's anchor of a heading's text.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
