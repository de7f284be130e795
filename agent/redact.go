package agent

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

const redactedKey = "[REDACTED:private_key]"

var (
	pemBegin = lazyRegexp(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----`)
	pemEnd   = lazyRegexp(`-----END[A-Z0-9 ]*PRIVATE KEY-----`)
)

// secretPatterns are applied in order; earlier, more specific patterns win (sk-ant- before
// sk-). A replacement either names the kind of secret or keeps the harmless prefix (the
// header or key name) and masks the value, so a reader still sees what was there. A
// regexp is compiled the first time a text holds one of its hints (see lazyRegexp).
var secretPatterns = []struct {
	hints []string // lowercase substrings one of which the text must contain, a cheap pre-filter
	re    func() *regexp.Regexp
	repl  string
}{
	// A whole PEM private key, or its start up to the end of the text when it is cut off.
	{[]string{"private key"}, lazyRegexp(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\z)`), redactedKey},
	{[]string{"github_pat_"}, lazyRegexp(`\bgithub_pat_[A-Za-z0-9_]{20,}`), "[REDACTED:github_token]"},
	{[]string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, lazyRegexp(`\bgh[pousr]_[A-Za-z0-9]{20,}`), "[REDACTED:github_token]"},
	{[]string{"glpat-"}, lazyRegexp(`\bglpat-[A-Za-z0-9_\-]{20,}`), "[REDACTED:gitlab_token]"},
	{[]string{"sk-ant-"}, lazyRegexp(`\bsk-ant-[A-Za-z0-9_\-]{10,}`), "[REDACTED:anthropic_key]"},
	{[]string{"sk-"}, lazyRegexp(`\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}`), "[REDACTED:openai_key]"},
	{[]string{"_live_"}, lazyRegexp(`\b(?:sk|rk)_live_[A-Za-z0-9]{16,}`), "[REDACTED:stripe_key]"},
	{[]string{"gsk_"}, lazyRegexp(`\bgsk_[A-Za-z0-9]{20,}`), "[REDACTED:groq_key]"},
	{[]string{"aiza"}, lazyRegexp(`\bAIza[0-9A-Za-z_\-]{35}`), "[REDACTED:google_key]"},
	{[]string{"npm_"}, lazyRegexp(`\bnpm_[A-Za-z0-9]{36}\b`), "[REDACTED:npm_token]"},
	{[]string{"akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"}, lazyRegexp(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b`), "[REDACTED:aws_key]"},
	{[]string{"xox"}, lazyRegexp(`\bxox[abposre]-[A-Za-z0-9\-]{10,}`), "[REDACTED:slack_token]"},
	{[]string{"xapp-"}, lazyRegexp(`\bxapp-\d-[A-Za-z0-9\-]{10,}`), "[REDACTED:slack_token]"},
	{[]string{"hooks.slack.com"}, lazyRegexp(`https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+`), "[REDACTED:slack_webhook]"},
	{[]string{"eyj"}, lazyRegexp(`\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`), "[REDACTED:jwt]"},
	// whilly's own tokens: whilly_w_ (worker), whilly_a_ (admin), whilly_r_ (read) and any
	// other kind letter, then the base64url secret.
	{[]string{"whilly_"}, lazyRegexp(`whilly_[a-z]_[A-Za-z0-9_\-]{20,}`), "[REDACTED:whilly_token]"},
	// "x-access-token:TOKEN" in base64, as git's http.extraheader carries a push token
	// (AUTHORIZATION: basic …): base64 of the 15 bytes "x-access-token:" is always this.
	{[]string{"ec1hy2nlc3mtdg9rzw46"}, lazyRegexp(`eC1hY2Nlc3MtdG9rZW46[A-Za-z0-9+/]*={0,2}`), "[REDACTED:github_basic_auth]"},
	{[]string{"x-access-token:"}, lazyRegexp(`(?i)\b(x-access-token:)[^\s@"'/]+`), "${1}[REDACTED]"},
	// user:password@ in URLs (database DSNs, git remotes).
	{[]string{"://"}, lazyRegexp(`(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+@`), "${1}[REDACTED]@"},
	// Authorization headers of any scheme, and bare bearer tokens.
	{[]string{"authorization"}, lazyRegexp(`(?i)\b((?:proxy-)?authorization"?\s*[:=]\s*"?(?:(?:bearer|basic|token|bot|digest)\s+)?)[^\s"',;]+`), "${1}[REDACTED]"},
	{[]string{"bearer"}, lazyRegexp(`(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]{8,}=*`), "${1}[REDACTED]"},
	// key=value and key: value for names that say "secret" (db_password=…, "api_key": "…",
	// AWS_SECRET_ACCESS_KEY=…). The name must end right before the separator, so
	// max_tokens=4096 and "input_tokens": 0 are left alone. A value already redacted by a
	// pattern above is taken whole, so what follows it (the host of a URL) survives.
	{[]string{"pass", "pwd", "secret", "token", "key", "credential"}, lazyRegexp(`(?i)\b((?:[a-z0-9]+[_\-.])*(?:password|passwd|pwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|client[_\-]?secret|credentials?)(?:[_\-.][a-z0-9]+)*"?\s*[:=]\s*"?)(\[REDACTED[^\]]*\]|[^\s"'&,;]+)`), "${1}[REDACTED]"},
}

// Redact masks secrets in s: GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_),
// whilly's own tokens (whilly_w_, whilly_a_, whilly_r_ …), Anthropic (sk-ant-) and
// OpenAI (sk-) keys, x-access-token basic auth (plain and base64), AWS access key ids, Slack tokens and
// webhooks, Google, Groq, Stripe, npm and GitLab keys, JWTs, PEM private keys (a cut-off
// one to the end of s), Authorization headers and bearer tokens, passwords in URLs, and the
// values of password=, secret:, api_key=, …_token= style assignments. It is idempotent and
// errs on the side of masking: prose such as "password: see below" loses a word.
func Redact(s string) string {
	lower := strings.ToLower(s)
	for _, p := range secretPatterns {
		if !containsAny(lower, p.hints) {
			continue
		}
		s = p.re().ReplaceAllString(s, p.repl)
		lower = strings.ToLower(s)
	}
	return s
}

// minMaskedValue is the shortest known secret maskValues masks: a shorter value would
// mask ordinary words.
const minMaskedValue = 8

// maskValues replaces every occurrence of each of values (known secrets, at least
// minMaskedValue bytes) in s with [REDACTED].
func maskValues(s string, values []string) string {
	for _, v := range values {
		if len(v) >= minMaskedValue && strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, "[REDACTED]")
		}
	}
	return s
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// tailString returns at most limit bytes from the end of s, starting on a rune boundary.
func tailString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	i := len(s) - limit
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// headString returns at most limit bytes from the start of s, ending on a rune boundary.
func headString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// redactTail returns the redacted tail of b, at most limit bytes. It redacts a wider window
// than it keeps, after dropping the first (possibly cut) word, so a secret cut in half at
// the window's edge is not left half visible; a key block whose BEGIN line fell off the
// window is masked up to its END line.
func redactTail(b []byte, limit int) string {
	s := string(b)
	if len(s) > 4*limit {
		s = tailString(s, 4*limit)
		if i := strings.IndexAny(s, " \t\r\n"); i >= 0 {
			s = s[i+1:]
		}
	}
	if end := pemEnd().FindStringIndex(s); end != nil && !pemBegin().MatchString(s[:end[0]]) {
		s = redactedKey + s[end[1]:]
	}
	return tailString(strings.TrimSpace(Redact(s)), limit)
}

// excerpt is the redacted tail of an attempt's output for Result.Excerpt: stdout, and
// stderr after it when there is any (stderr gets at least half when both are long).
func excerpt(stdout, stderr []byte) string {
	const sep = "\n--- stderr ---\n"
	so := redactTail(stdout, MaxExcerptBytes)
	se := redactTail(stderr, MaxExcerptBytes)
	switch {
	case se == "":
		return so
	case so == "":
		return se
	}
	budget := MaxExcerptBytes - len(sep)
	seMax := max(budget/2, budget-len(so))
	se = tailString(se, seMax)
	so = tailString(so, budget-len(se))
	return so + sep + se
}

// bound returns s with its middle cut to keep it within limit bytes.
func bound(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const cut = " … "
	h := (limit - len(cut)) / 2
	return headString(s, h) + cut + tailString(s, limit-len(cut)-h)
}

// SecretFinding is one secret FindSecrets found.
type SecretFinding struct {
	// Kind names the pattern: the kinds of Redact's placeholders (github_token,
	// private_key, aws_key …), or url_credentials, authorization, bearer and assignment for
	// the patterns that keep a prefix and mask what follows it.
	Kind string
	// Named is true when the pattern recognises the secret by the name or scheme next to
	// it (password=…, Authorization: …, bearer …, user:password@) rather than by the
	// value's own shape, so the value may as well be code that handles a secret.
	Named bool
	// Value is the secret itself: never log or report it.
	Value string
}

// FindSecrets reports what Redact would mask in s, using the same patterns in the same
// order: one finding per match, a value masked by an earlier pattern not found again by
// a later one. It lets a caller refuse text (a diff about to be pushed) instead of
// masking it.
func FindSecrets(s string) []SecretFinding {
	var out []SecretFinding
	lower := strings.ToLower(s)
	for _, p := range secretPatterns {
		if !containsAny(lower, p.hints) {
			continue
		}
		kind, named := secretKind(p.repl, p.hints)
		matches := p.re().FindAllStringSubmatchIndex(s, -1)
		if len(matches) == 0 {
			continue
		}
		for _, m := range matches {
			value := s[m[0]:m[1]]
			if named && len(m) >= 4 && m[2] >= 0 {
				value = strings.TrimSuffix(s[m[3]:m[1]], "@")
			}
			if strings.HasPrefix(value, "[REDACTED") {
				continue
			}
			out = append(out, SecretFinding{Kind: kind, Named: named, Value: value})
		}
		s = p.re().ReplaceAllString(s, p.repl)
		lower = strings.ToLower(s)
	}
	return out
}

// secretKind names a pattern of secretPatterns: by its placeholder when it has one, else
// by its first hint (the patterns that keep a prefix).
func secretKind(repl string, hints []string) (kind string, named bool) {
	if k, ok := strings.CutPrefix(repl, "[REDACTED:"); ok {
		return strings.TrimSuffix(k, "]"), false
	}
	switch hints[0] {
	case "://":
		return "url_credentials", true
	case "authorization":
		return "authorization", true
	case "bearer":
		return "bearer", true
	case "x-access-token:":
		return "basic_auth", true
	}
	return "assignment", true
}

// Storable makes an agent's text fit to send and store: NUL bytes removed (Postgres text
// refuses them) and bytes that are not UTF-8 replaced by U+FFFD. repaired says it had to
// change something; the COMPLETE event then says the result was repaired.
func Storable(s string) (clean string, repaired bool) {
	clean = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	return clean, clean != s
}
