// Package selector parses and evaluates Prometheus-style label selectors,
// such as {comm="api",container=~"3f2a.*"}, over flint's sample labels.
//
// As in Prometheus, regular expressions are anchored at both ends and a
// missing label has the empty value, so {pod=""} selects samples without a
// pod.
package selector

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
)

// Op is a matcher's comparison.
type Op string

// Matcher operators.
const (
	Equal     Op = "="
	NotEqual  Op = "!="
	Match     Op = "=~"
	NotMatch  Op = "!~"
	maxLength    = 4096 // bytes of selector text accepted
	// maxRegexSize bounds a regular expression's size with its repeats
	// expanded, roughly its compiled instructions: RE2 matches in time
	// linear in it, but 4 KB of "a{1000}" compiles to 370,000 instructions
	// and over 100 MB. 10,000 keeps any one under 4 MB.
	maxRegexSize = 10_000
)

// Matcher tests one label.
type Matcher struct {
	Name  string
	Op    Op
	Value string
	re    *regexp.Regexp
}

// Selector is a conjunction of matchers; the empty Selector matches all.
type Selector []Matcher

// Matches reports whether labels satisfy every matcher.
func (s Selector) Matches(labels map[string]string) bool {
	for i := range s {
		if !s[i].Matches(labels[s[i].Name]) {
			return false
		}
	}
	return true
}

// Matches reports whether a label value satisfies m.
func (m *Matcher) Matches(v string) bool {
	switch m.Op {
	case Equal:
		return v == m.Value
	case NotEqual:
		return v != m.Value
	case Match:
		return m.re.MatchString(v)
	case NotMatch:
		return !m.re.MatchString(v)
	}
	return false
}

// String formats s so that Parse reads it back.
func (s Selector) String() string {
	parts := make([]string, len(s))
	for i, m := range s {
		parts[i] = m.Name + string(m.Op) + strconv.Quote(m.Value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Parse reads a selector: "{name op "value", ...}"; "" and "{}" select all.
func Parse(text string) (Selector, error) {
	if len(text) > maxLength {
		return nil, fmt.Errorf("selector longer than %d bytes", maxLength)
	}
	p := parser{s: strings.TrimSpace(text)}
	if p.s == "" {
		return nil, nil
	}
	sel, err := p.selector()
	if err != nil {
		return nil, fmt.Errorf("bad selector %q: %w", text, err)
	}
	return sel, nil
}

type parser struct {
	s   string
	pos int
}

func (p *parser) selector() (Selector, error) {
	if !p.consume("{") {
		return nil, p.errorf("want '{'")
	}
	var sel Selector
	for {
		p.space()
		if p.consume("}") {
			break
		}
		if len(sel) > 0 {
			if !p.consume(",") {
				return nil, p.errorf("want ',' or '}'")
			}
			p.space()
			if p.consume("}") { // trailing comma, as Prometheus allows
				break
			}
		}
		m, err := p.matcher()
		if err != nil {
			return nil, err
		}
		sel = append(sel, m)
	}
	p.space()
	if p.pos != len(p.s) {
		return nil, p.errorf("unexpected text after '}'")
	}
	return sel, nil
}

func (p *parser) matcher() (Matcher, error) {
	var m Matcher
	start := p.pos
	for p.pos < len(p.s) && isNameChar(p.s[p.pos], p.pos == start) {
		p.pos++
	}
	if p.pos == start {
		return m, p.errorf("want a label name")
	}
	m.Name = p.s[start:p.pos]
	p.space()
	switch {
	case p.consume("=~"):
		m.Op = Match
	case p.consume("!~"):
		m.Op = NotMatch
	case p.consume("!="):
		m.Op = NotEqual
	case p.consume("="):
		m.Op = Equal
	default:
		return m, p.errorf("want =, !=, =~ or !~ after %q", m.Name)
	}
	p.space()
	v, err := p.quoted()
	if err != nil {
		return m, err
	}
	m.Value = v
	if m.Op == Match || m.Op == NotMatch {
		if m.re, err = compile(v); err != nil {
			return m, fmt.Errorf("label %s: %w", m.Name, err)
		}
	}
	return m, nil
}

// quoted reads a double-quoted string with Go escapes.
func (p *parser) quoted() (string, error) {
	if p.pos >= len(p.s) || p.s[p.pos] != '"' {
		return "", p.errorf("want a double-quoted value")
	}
	end := p.pos + 1
	for end < len(p.s) && p.s[end] != '"' {
		if p.s[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(p.s) {
		return "", p.errorf("unterminated string")
	}
	v, err := strconv.Unquote(p.s[p.pos : end+1])
	if err != nil {
		return "", p.errorf("bad string %s", p.s[p.pos:end+1])
	}
	p.pos = end + 1
	return v, nil
}

func (p *parser) consume(tok string) bool {
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) space() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n') {
		p.pos++
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// compile compiles an anchored regular expression after checking its size,
// which it estimates from the parsed expression before expanding repeats.
func compile(expr string) (*regexp.Regexp, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, err
	}
	if n := regexSize(re); n > maxRegexSize {
		return nil, fmt.Errorf("regular expression too large: %d steps with repeats expanded, more than %d", n, maxRegexSize)
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

// regexSize estimates the instructions re compiles to; it saturates
// rather than overflowing.
func regexSize(re *syntax.Regexp) int {
	n := 1
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		n = max(times, 1) * regexSize(re.Sub[0])
	default:
		for _, sub := range re.Sub {
			n += regexSize(sub)
		}
	}
	return min(n, 1<<30)
}
