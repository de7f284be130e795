package agent

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// ErrPromptInjection means untrusted text holds a known prompt-injection pattern. The
// worker fails the task with ReasonPromptInjection and does not run the agent.
var ErrPromptInjection = errors.New("prompt injection pattern in untrusted text")

// InjectionError says which field matched which pattern. It unwraps to ErrPromptInjection.
type InjectionError struct {
	Field   string // "description", "acceptance_criteria[2]" …
	Pattern string // a pattern name such as "ignore_previous_instructions", or "deny:<regexp>"
	Match   string // the matched text, normalised, redacted and at most 80 bytes
}

func (e *InjectionError) Error() string {
	return fmt.Sprintf("%v: %s matches %s (%q)", ErrPromptInjection, e.Field, e.Pattern, e.Match)
}

func (e *InjectionError) Unwrap() error { return ErrPromptInjection }

type injectionPattern struct {
	name string
	expr string
}

// scanPattern is an injection pattern with its needles: strings one of which every match
// of re contains (nil: unknown). A text that holds none of them cannot match, and re does
// not run on it (see needles). re is compiled the first time a text holds a needle:
// ordinary text holds few, and compiling all the patterns took ~0.8 ms of CPU at every
// start of the worker (a benchmark of regexp.MustCompile on them).
type scanPattern struct {
	name    string
	re      func() *regexp.Regexp
	needles []string
}

// mayMatch reports whether text holds one of p's needles, or p has none.
func (p scanPattern) mayMatch(text string) bool {
	if p.needles == nil {
		return true
	}
	for _, n := range p.needles {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

// withNeedles gives each pattern its needles.
func withNeedles(ps []injectionPattern) []scanPattern {
	out := make([]scanPattern, len(ps))
	for i, p := range ps {
		ns := needles(p.expr)
		if ns != nil {
			slices.Sort(ns)
			ns = slices.Compact(ns)
		}
		out[i] = scanPattern{p.name, lazyRegexp(p.expr), ns}
	}
	return out
}

// maxNeedles bounds the needles of a pattern: past it, the pattern always runs.
const maxNeedles = 64

// needles returns strings one of which every match of re contains, or nil when the
// syntax does not say. Checking them first costs nanoseconds where the regexp costs
// microseconds, on every field of every task's prompt. It is RE2's prefilter, reduced:
// a literal is itself; a small class of single characters, each of them; a sequence,
// the needles of one of its parts (each part's match lies inside the whole's); an
// alternation, the union of its branches' (one of them matched), unknown if one is;
// a repetition of at least one, its body's; anything else (\b, \W, optional parts,
// case-folded literals) says nothing.
func needles(expr string) []string {
	t, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	return required(t.Simplify())
}

func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(out) == 8 {
					return nil
				}
				out = append(out, string(r))
			}
		}
		return out
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []string
		for _, sub := range re.Sub {
			if n := required(sub); n != nil && (best == nil || shortest(n) > shortest(best)) {
				best = n
			}
		}
		return best
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			n := required(sub)
			if n == nil || len(out)+len(n) > maxNeedles {
				return nil
			}
			out = append(out, n...)
		}
		return out
	default: // \b, \W, optional parts and the like say nothing
	}
	return nil
}

// shortest is the length of the shortest of ns.
func shortest(ns []string) int {
	m := len(ns[0])
	for _, n := range ns[1:] {
		m = min(m, len(n))
	}
	return m
}

// injectionPatterns run on normalised text (see normalizeForScan): lowercase, look-alike
// letters folded to ASCII, invisible characters dropped, whitespace collapsed. They port
// the Python system's list ("ignore previous instructions", <system> tags with homoglyphs,
// [INST], <|im_start|>, <|im_end|>) and extend it. Each is narrow enough that ordinary
// issue text ("ignore whitespace in the diff", "the user is now redirected") passes: a
// false positive fails a task outright. The list is built on first use (see scanPattern).
var injectionPatterns = sync.OnceValue(func() []scanPattern {
	return withNeedles([]injectionPattern{
		{"ignore_previous_instructions", `\bignore\W+(?:(?:all|any|the|your|of|my|these|those|every)\W+)*(?:previous|prior|above|earlier|preceding|former|foregoing|original|system)\W+(?:instructions?|prompts?|directions?|directives?|rules|guidance|guidelines)\b`},
		{"ignore_the_above", `\bignore\W+(?:all\W+)?(?:of\W+)?(?:everything\W+|the\W+)?(?:above|written\W+above|before\W+this)(?:\s*$|\s*[.;:!]|\W+(?:and|instructions?|text|prompts?|rules)\b)`},
		{"disregard_previous", `\bdisregard\W+(?:(?:all|any|the|your|of|my|everything)\W+)*(?:previous|prior|above|earlier|preceding|foregoing|original|system|instructions|rules)\b`},
		{"forget_previous", `\bforget\W+(?:(?:all|any|the|your|of|my)\W+)*(?:previous|prior|above|earlier|preceding|original|system)\W+(?:instructions?|prompts?|rules|context|messages?|guidelines)\b|\bforget\W+everything\W+(?:above|before|you\W+(?:were|have\W+been)\W+told)\b`},
		{"do_not_follow_instructions", `\b(?:do\W+not|don\W?t|stop)\W+follow(?:ing)?\W+(?:(?:the|your|any|all)\W+)*(?:previous|prior|above|system|original|earlier|operator\W?s?)\W+(?:instructions?|rules|prompts?|guidelines)\b`},
		{"you_are_now", `\byou\W+are\W+now\W+(?:a|an|the|my|no\W+longer|dan|in\W+\w+\W+mode|unrestricted|unfiltered|uncensored|jailbroken|free\W+from|acting\W+as|going\W+to\W+act|called|named)\b`},
		{"system_prompt_override", `\bsystem\W+(?:prompt|message|instructions?)\W+(?:override|overwrite|replacement|update|injection)\b|\bnew\W+system\W+(?:prompt|message|instructions?)\b|\b(?:override|overwrite|replace|bypass|ignore|reveal|print|show|leak|dump|repeat|output|disclose)\W+(?:(?:the|your|this|my|its)\W+)*(?:system|hidden|initial|original|developer)\W+(?:prompt|instructions?|message)\b`},
		{"role_tag", `<\s*/?\s*(?:system|sys|system_prompt)\s*>|<<\s*/?\s*sys\s*>>|\[\s*/?\s*inst\s*\]`},
		{"chat_template_token", `<\|\s*(?:im_start|im_end|im_sep|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text|end_of_turn)\s*\|>|<\s*/?\s*(?:start_of_turn|end_of_turn)\s*>`},
		{"fence_escape", `<\s*/?\s*untrusted|untrusted-data\s+nonce`},
		{"completion_marker", `<\s*promise\s*>\s*complete|complete\s*<\s*/\s*promise\s*>`},
		{"mode_switch", `\b(?:enable|enter|activate|switch\W+to|turn\W+on)\W+(?:the\W+)?(?:dan|god|jailbreak|unrestricted)\W+mode\b|\bdo\W+anything\W+now\b|\bjailbreak(?:ed)?\W+mode\b`},
		{"act_unrestricted", `\b(?:act|behave|respond|answer)\W+as\W+(?:if\W+you\W+(?:are|were)\W+)?(?:an?\W+)?(?:unrestricted|unfiltered|uncensored|jailbroken|evil|malicious)\b|\bpretend\W+(?:that\W+)?you\W+(?:are|have)\W+(?:no\W+(?:rules|restrictions|guidelines|limits|filters)|unrestricted|not\W+bound)`},
		{"credential_exfiltration", `\b(?:cat|print|echo|send|upload|post|curl|wget|nc|scp|exfiltrate|leak|base64)\b[^\n]{0,80}(?:~/\.ssh\b|\.ssh/id_|\bid_rsa\b|\bid_ed25519\b|\.aws/credentials|\.netrc\b|\.git-credentials|/etc/shadow|\.docker/config\.json|\$\{?whilly_\w*(?:token|secret|key)|\.claude/\.credentials|\.codex/auth\.json)|\b(?:printenv|env)\s*\|\s*(?:curl|wget|nc|base64)\b`},
	})
})

// squashedPatterns run on the normalised text with everything but letters and digits
// removed, catching "i.g.n.o.r.e p-r-e-v-i-o-u-s instructions" and friends. Only phrases
// long enough not to appear by accident inside ordinary words belong here. The list is
// built on first use (see scanPattern).
var squashedPatterns = sync.OnceValue(func() []scanPattern {
	return withNeedles([]injectionPattern{
		{"ignore_previous_instructions", `ignore(?:all|any|the|your|of)*(?:previous|prior|above|earlier|preceding)(?:instructions?|prompts?|rules|directions)`},
		{"disregard_previous", `disregard(?:all|any|the|your)*(?:previous|prior|above|preceding)(?:instructions?|prompts?|rules|directions|text)`},
		{"system_prompt_override", `systempromptoverride|override(?:the|your)?systemprompt`},
		{"mode_switch", `doanythingnow|jailbreakmode`},
	})
})

// ParseDenyPatterns compiles WHILLY_PROMPT_DENY_PATTERNS: regular expressions separated by
// commas (a comma inside a pattern is written \x2c). Blank entries are skipped. Matching
// is case-insensitive unless a pattern sets its own flags.
func ParseDenyPatterns(s string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "(?") {
			p = "(?i)" + p
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("parse deny pattern %q: %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// CheckInjection reports an *InjectionError when text, from the named field, holds a known
// injection pattern or matches one of deny (checked against the text as written and as
// normalised). It is what BuildPrompt runs on every field that comes from an issue.
func CheckInjection(field, text string, deny []*regexp.Regexp) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	norm := normalizeForScan(text)
	for _, p := range injectionPatterns() {
		if !p.mayMatch(norm) {
			continue
		}
		if m := p.re().FindString(norm); m != "" {
			return &InjectionError{Field: field, Pattern: p.name, Match: bound(Redact(m), 80)}
		}
	}
	squashed := squash(norm)
	for _, p := range squashedPatterns() {
		if !p.mayMatch(squashed) {
			continue
		}
		if m := p.re().FindString(squashed); m != "" {
			return &InjectionError{Field: field, Pattern: p.name, Match: bound(m, 80)}
		}
	}
	for _, re := range deny {
		m := re.FindString(text)
		if m == "" {
			m = re.FindString(norm)
		}
		if m != "" {
			return &InjectionError{Field: field, Pattern: "deny:" + re.String(), Match: bound(Redact(m), 80)}
		}
	}
	return nil
}

// normalizeForScan folds text so that look-alike spellings match the ASCII patterns: it
// drops format characters (zero-width spaces and joiners, bidi controls, soft hyphens) and
// combining marks, maps fullwidth, mathematical and circled letters and common Cyrillic and
// Greek homoglyphs to ASCII, lowercases, and collapses whitespace runs to one space. It is
// a small stand-in for NFKC plus confusables folding (the package may not import x/text).
func normalizeForScan(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if r >= utf8.RuneSelf { // ASCII has no format or combining characters, nothing to fold
			if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) {
				continue
			}
			r = foldRune(r)
		}
		if unicode.IsSpace(r) || (r < 0x20 && r != 0) || r == 0x7f {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// foldRune maps one look-alike rune to ASCII where it has an obvious counterpart.
func foldRune(r rune) rune {
	switch {
	case r < 0x80:
		return r
	case r >= 0xFF01 && r <= 0xFF5E: // fullwidth ASCII
		return r - 0xFEE0
	case r == 0x3000: // ideographic space
		return ' '
	case r >= 0x1D400 && r <= 0x1D6A3: // mathematical alphanumeric letters, 52 per style
		i := (r - 0x1D400) % 52
		if i < 26 {
			return 'A' + i
		}
		return 'a' + i - 26
	case r >= 0x1D7CE && r <= 0x1D7FF: // mathematical digits, 10 per style
		return '0' + (r-0x1D7CE)%10
	case r >= 0x24B6 && r <= 0x24CF: // circled capitals
		return 'A' + r - 0x24B6
	case r >= 0x24D0 && r <= 0x24E9: // circled small letters
		return 'a' + r - 0x24D0
	}
	if a, ok := homoglyph(r); ok {
		return a
	}
	return r
}

// homoglyphFrom and homoglyphTo pair Cyrillic, Greek, small-capital and bracket runes that
// render like ASCII with that ASCII (rune i of From maps to byte i of To).
const (
	homoglyphFrom = "авеёкмнорстухѕіїјһԁԛԝɡӏАВЕКМНОРСТУХЅІЈԀԚԜαβεηικνορτυχγΑΒΕΖΗΙΚΜΝΟΡΤΥΧıℓſᴀʙᴄᴅᴇɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢ＜＞‹›〈〉⟨⟩﹤﹥｜∣⁄∕［］"
	homoglyphTo   = "abeekmhopctyxsiijhdqwglabekmhopctyxsijdqwabenikvoptuxyabezhikmnoptyxilsabcdeghijklmnoprstuvwyz<><><><><>||//[]"
)

func homoglyph(r rune) (rune, bool) {
	i := 0
	for _, f := range homoglyphFrom {
		if f == r {
			return rune(homoglyphTo[i]), true
		}
		i++
	}
	return r, false
}

// squash keeps only ASCII letters and digits of normalised text.
func squash(norm string) string {
	b := make([]byte, 0, len(norm))
	for i := 0; i < len(norm); i++ {
		c := norm[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b = append(b, c)
		}
	}
	return string(b)
}
