package intake

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	gmhtml "github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Kinds of hidden content StripHidden removes, as the status comment names them.
const (
	HiddenComments   = "HTML comments"
	HiddenMarkup     = "processing instructions, declarations and CDATA"
	HiddenHTML       = "script and style elements"
	HiddenLinkRefs   = "link-reference comments"
	HiddenLinks      = "link destinations and titles"
	HiddenAttributes = "HTML attributes"
	HiddenChars      = "invisible characters"
	HiddenImageText  = "image alt text and titles"
)

// hiddenOrder is the order in which StripHidden lists the kinds it removed.
var hiddenOrder = []string{HiddenComments, HiddenMarkup, HiddenHTML, HiddenLinkRefs, HiddenLinks, HiddenAttributes, HiddenChars, HiddenImageText}

// markdown renders Markdown as GitHub does for issues and comments: CommonMark with the
// GFM extensions and footnotes, raw HTML passed through to be sanitized after.
var markdown = goldmark.New(
	goldmark.WithExtensions(
		extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignNone)),
		extension.Strikethrough, extension.Linkify, extension.TaskList, extension.Footnote,
	),
	goldmark.WithRendererOptions(gmhtml.WithUnsafe()),
)

// StripHidden returns the text a reader sees on the page GitHub renders from issue text
// (Markdown with raw HTML), and the kinds of hidden content it removed, in a fixed order.
//
// It renders the Markdown to HTML, then walks the HTML keeping only what an allow-list
// sanitizer like GitHub's would show as text: element content, never attributes (alt,
// title, aria-label, data-*, href, src), never comments, processing instructions,
// declarations or CDATA, never the content of script, style and the other elements a
// page does not show as text. The result is Markdown again, so that a maintainer's
// structure survives: headings as `#`, lists and task lists as `-` and `- [ ]`, block
// quotes as `>`, code blocks fenced with their language (a ```whilly block comes out as
// it went in) and code spans in backticks; link text without its destination; images as
// nothing. Characters Markdown would read as markup are escaped, so the result renders
// to the same text and StripHidden of it is itself. Invisible characters (zero-width,
// bidi controls, Unicode tags, variation selectors, soft hyphens, fillers, controls) go
// everywhere, code included.
//
// What stays: <details> blocks. Their summary shows on the page and one click shows the
// rest, as the maintainer reviewing the issue is expected to; removing them would also
// drop the long logs and stack traces issues put there.
func StripHidden(s string) (string, []string) {
	w := &visibleWriter{kinds: map[string]bool{}}
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	src := w.runes(s)

	pc := parser.NewContext()
	doc := markdown.Parser().Parse(text.NewReader([]byte(src)), parser.WithContext(pc))
	if len(pc.References()) > 0 {
		w.note(HiddenLinkRefs)
	}
	var rendered bytes.Buffer
	if err := markdown.Renderer().Render(&rendered, []byte(src), doc); err != nil {
		// Rendering into memory fails only on a bug: show nothing rather than everything.
		return "", []string{HiddenHTML}
	}
	w.markupKinds(rendered.Bytes())
	var out string
	nodes, err := html.ParseFragment(bytes.NewReader(rendered.Bytes()), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if err == nil {
		root := &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body}
		for _, n := range nodes {
			root.AppendChild(n)
		}
		out = w.blocks(root, 0)
	}
	if err != nil || len(out) > 2*len(s)+64 {
		// Nesting too deep for the HTML parser, or so deep that the quotes' and lists'
		// prefixes would multiply the text: the same text, flat.
		out = w.flatText(rendered.Bytes())
	}
	var kinds []string
	for _, k := range hiddenOrder {
		if w.kinds[k] {
			kinds = append(kinds, k)
		}
	}
	return out, kinds
}

type visibleWriter struct {
	kinds map[string]bool
	// listAlt is set when the last list written used the other markers ("+", "1)"): two
	// lists one after the other take turns, or Markdown would read them as one.
	listAlt bool
	quoted  bool // inside a block quote
}

func (w *visibleWriter) note(kind string) { w.kinds[kind] = true }

// runes is visibleRunes, noting when it removed something.
func (w *visibleWriter) runes(s string) string {
	out := visibleRunes(s)
	if out != s {
		w.note(HiddenChars)
	}
	return out
}

// markupKinds notes the comments, processing instructions, declarations and CDATA of
// the rendered HTML, which the HTML parser turns into comments or drops unseen.
func (w *visibleWriter) markupKinds(h []byte) {
	z := html.NewTokenizer(bytes.NewReader(h))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return
		case html.DoctypeToken:
			w.note(HiddenMarkup)
		case html.CommentToken:
			if bytes.HasPrefix(z.Raw(), []byte("<!--")) {
				w.note(HiddenComments)
			} else {
				w.note(HiddenMarkup)
			}
		default:
		}
	}
}

// flatText is the visible text of rendered HTML as plain paragraphs, without nesting.
func (w *visibleWriter) flatText(h []byte) string {
	z := html.NewTokenizer(bytes.NewReader(h))
	var (
		b    inlineText
		skip int
	)
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return paragraph(b.String())
		case html.TextToken:
			if skip == 0 {
				b.Text(w.runes(string(z.Text())))
			}
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, more := z.TagName()
			n := &html.Node{Type: html.ElementNode, Data: string(name), DataAtom: atom.Lookup(name)}
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				n.Attr = append(n.Attr, html.Attribute{Key: string(k), Val: string(v)})
			}
			w.attrs(n)
			if unshown[n.DataAtom] && tt == html.StartTagToken {
				w.note(HiddenHTML)
				skip++
			} else if unshown[n.DataAtom] && tt == html.EndTagToken && skip > 0 {
				skip--
			}
			if blockElems[n.DataAtom] || n.DataAtom == atom.Br {
				b.WriteString("\n")
			}
		default: // comments and doctypes: noted from the tokens
		}
	}
}

// unshown are the elements whose content a page does not show as text.
var unshown = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Template: true, atom.Iframe: true, atom.Noscript: true,
	atom.Noembed: true, atom.Noframes: true, atom.Object: true, atom.Embed: true, atom.Math: true,
	atom.Svg: true, atom.Xmp: true, atom.Title: true, atom.Textarea: true, atom.Select: true,
	atom.Head: true, atom.Frameset: true, atom.Audio: true, atom.Video: true, atom.Canvas: true,
}

// blockElems are the elements that start a block of their own.
var blockElems = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Aside: true, atom.Header: true,
	atom.Footer: true, atom.Nav: true, atom.Main: true, atom.Details: true, atom.Summary: true, atom.Figure: true,
	atom.Figcaption: true, atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Address: true, atom.Center: true,
	atom.Fieldset: true, atom.Legend: true, atom.Form: true, atom.Caption: true, atom.Body: true, atom.Html: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
	atom.Pre: true, atom.Ul: true, atom.Ol: true, atom.Li: true, atom.Blockquote: true, atom.Hr: true,
	atom.Table: true, atom.Thead: true, atom.Tbody: true, atom.Tfoot: true, atom.Tr: true,
}

// maxDepth bounds the nesting the walk follows; deeper content is still shown, flat.
const maxDepth = 64

// blocks renders the children of n as Markdown blocks separated by blank lines.
func (w *visibleWriter) blocks(n *html.Node, depth int) string {
	var (
		parts []string
		inl   inlineText
	)
	flush := func() {
		if p := paragraph(inl.String()); p != "" {
			parts = append(parts, p)
		}
		inl.Reset()
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && blockElems[c.DataAtom] && !unshown[c.DataAtom] {
			flush()
			w.attrs(c)
			if b := w.block(c, depth+1); b != "" {
				parts = append(parts, b)
			}
			continue
		}
		w.inline(c, &inl, depth+1)
	}
	flush()
	return strings.Join(parts, "\n\n")
}

// block renders one block element.
func (w *visibleWriter) block(n *html.Node, depth int) string {
	if depth > maxDepth {
		var b inlineText
		w.inline(n, &b, depth)
		return paragraph(b.String())
	}
	switch n.DataAtom {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		var b inlineText
		w.inlineChildren(n, &b, depth)
		h := strings.Join(strings.Fields(b.String()), " ")
		if h == "" {
			return ""
		}
		if strings.HasSuffix(h, "#") {
			h = h[:len(h)-1] + `\#`
		}
		return strings.Repeat("#", int(n.Data[1]-'0')) + " " + h
	case atom.Pre:
		return w.codeBlock(n)
	case atom.Hr:
		return "---"
	case atom.Blockquote:
		if w.quoted {
			return w.blocks(n, depth) // a quote in a quote is the same quote
		}
		w.quoted = true
		defer func() { w.quoted = false }()
		return prefixLines(w.blocks(n, depth), "> ", "> ")
	case atom.Ul, atom.Ol:
		return w.list(n, depth)
	case atom.Table, atom.Thead, atom.Tbody, atom.Tfoot:
		var rows []string
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && blockElems[c.DataAtom] {
				w.attrs(c)
				if r := w.block(c, depth+1); r != "" {
					rows = append(rows, r)
				}
			} else {
				var b inlineText
				w.inline(c, &b, depth)
				if p := paragraph(b.String()); p != "" {
					rows = append(rows, p)
				}
			}
		}
		return strings.Join(rows, "\n\n")
	case atom.Tr:
		var cells []string
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			var b inlineText
			if c.Type == html.ElementNode && (c.DataAtom == atom.Td || c.DataAtom == atom.Th) {
				w.attrs(c)
				w.inlineChildren(c, &b, depth)
			} else {
				w.inline(c, &b, depth)
			}
			if cell := strings.Join(strings.Fields(b.String()), " "); cell != "" {
				cells = append(cells, cell)
			}
		}
		return paragraph(strings.Join(cells, ` \| `))
	default:
		return w.blocks(n, depth)
	}
}

// list renders a list, each item's lines under its marker.
func (w *visibleWriter) list(n *html.Node, depth int) string {
	alt := w.listAlt
	num := 1
	if n.DataAtom == atom.Ol {
		if v, err := strconv.Atoi(attr(n, "start")); err == nil && v >= 0 && v < 1e9 {
			num = v
		}
	}
	var items []string
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		var body string
		if c.Type == html.ElementNode && c.DataAtom == atom.Li {
			w.attrs(c)
			body = w.blocks(c, depth+1)
		} else {
			var b inlineText
			w.inline(c, &b, depth+1)
			body = paragraph(b.String())
		}
		if body == "" {
			continue
		}
		marker := "- "
		if n.DataAtom == atom.Ol {
			marker = strconv.Itoa(num) + ". "
			if alt {
				marker = strconv.Itoa(num) + ") "
			}
			num++
		} else if alt {
			marker = "+ "
		}
		items = append(items, prefixLines(body, marker, strings.Repeat(" ", len(marker))))
	}
	w.listAlt = alt != (len(items) > 0) // a list that shows nothing is no list
	return strings.Join(items, "\n")
}

// codeBlock renders <pre> as a fenced code block, its language kept.
func (w *visibleWriter) codeBlock(n *html.Node) string {
	var b strings.Builder
	lang := ""
	if c := n.FirstChild; c != nil && c.NextSibling == nil && c.Type == html.ElementNode && c.DataAtom == atom.Code {
		for _, f := range strings.Fields(attr(c, "class")) {
			if l, ok := strings.CutPrefix(f, "language-"); ok && !strings.ContainsAny(l, "`~") {
				lang = w.runes(l)
				break
			}
		}
	}
	w.attrs(n)
	w.rawText(n, &b)
	code := b.String()
	if code != "" && !strings.HasSuffix(code, "\n") {
		code += "\n"
	}
	fence := strings.Repeat("`", max(3, longestRun(code, '`')+1))
	return fence + lang + "\n" + code + fence
}

// rawText writes the text under n as it is, as in code.
func (w *visibleWriter) rawText(n *html.Node, b *strings.Builder) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		switch c.Type {
		case html.TextNode:
			b.WriteString(w.runes(c.Data))
		case html.ElementNode:
			if unshown[c.DataAtom] {
				w.note(HiddenHTML)
				continue
			}
			if c.DataAtom != atom.Code {
				w.attrs(c)
			}
			if c.DataAtom == atom.Br {
				b.WriteString("\n")
			}
			w.rawText(c, b)
		default:
		}
	}
}

func (w *visibleWriter) inlineChildren(n *html.Node, b *inlineText, depth int) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.inline(c, b, depth+1)
	}
}

// inline writes the visible text of n, escaped, to b.
func (w *visibleWriter) inline(n *html.Node, b *inlineText, depth int) {
	switch n.Type {
	case html.TextNode:
		b.Text(w.runes(n.Data))
		return
	case html.ElementNode:
	default:
		return // comments and doctypes: noted from the tokens
	}
	if unshown[n.DataAtom] {
		w.note(HiddenHTML)
		return
	}
	switch n.DataAtom {
	case atom.Img:
		if strings.TrimSpace(attr(n, "alt")) != "" || strings.TrimSpace(attr(n, "title")) != "" {
			w.note(HiddenImageText)
		}
		if strings.ContainsAny(attr(n, "src"), "?#") {
			w.note(HiddenAttributes)
		}
		w.attrs(n)
		return
	case atom.Br:
		b.WriteString("\n")
		return
	case atom.Input:
		// A task list's checkbox, first in its item.
		w.attrs(n)
		if attr(n, "type") == "checkbox" && n.Parent != nil && n.Parent.DataAtom == atom.Li && n.PrevSibling == nil {
			if hasAttr(n, "checked") {
				b.WriteString("[x]")
			} else {
				b.WriteString("[ ]")
			}
			if t := n.NextSibling; t == nil || t.Type != html.TextNode || !strings.HasPrefix(t.Data, " ") {
				b.WriteString(" ")
			}
		}
		return
	case atom.Code:
		var c strings.Builder
		w.attrs(n)
		w.rawText(n, &c)
		b.WriteString(codeSpan(c.String()))
		return
	case atom.A:
		if strings.HasPrefix(attr(n, "class"), "footnote-backref") {
			return
		}
		w.attrs(n)
		w.inlineChildren(n, b, depth)
		if !linkShown(attr(n, "href"), attr(n, "class"), plainText(n)) || strings.TrimSpace(attr(n, "title")) != "" {
			w.note(HiddenLinks)
		}
		return
	default:
	}
	w.attrs(n)
	if n.DataAtom == atom.Strong || n.DataAtom == atom.B {
		// Bold stays bold where it can be written so: a bold line is how issues head
		// their "Acceptance criteria" and "Test steps".
		var t inlineText
		w.inlineChildren(n, &t, depth)
		b.WriteString(strongText(n, t.String()))
		return
	}
	if depth > maxDepth || blockElems[n.DataAtom] {
		b.WriteString("\n")
		defer b.WriteString("\n")
	}
	w.inlineChildren(n, b, depth)
}

// strongText is bold text t as `**t**` when it stands apart from the text around it
// (Markdown would read the asterisks back as bold), else as it is.
func strongText(n *html.Node, t string) string {
	if t == "" || strings.TrimSpace(t) != t || strings.Contains(t, "\n") || strings.HasPrefix(t, `\*`) || strings.HasSuffix(t, `\*`) {
		return t
	}
	apart := func(s *html.Node, edge func(string) (rune, bool)) bool {
		if s == nil {
			return true
		}
		if s.Type != html.TextNode {
			return false
		}
		r, ok := edge(s.Data)
		return !ok || unicode.IsSpace(r) || r == ':' || r == '.' || r == ','
	}
	last := func(s string) (rune, bool) {
		r := []rune(s)
		if len(r) == 0 {
			return 0, false
		}
		return r[len(r)-1], true
	}
	first := func(s string) (rune, bool) {
		for _, r := range s {
			return r, true
		}
		return 0, false
	}
	if !apart(n.PrevSibling, last) || !apart(n.NextSibling, first) {
		return t
	}
	if r, _ := first(t); unicode.IsPunct(r) || unicode.IsSymbol(r) {
		return t
	}
	if r, _ := last(t); unicode.IsPunct(r) && r != ':' || unicode.IsSymbol(r) {
		return t
	}
	return "**" + t + "**"
}

// inlineText is inline Markdown being written: text is escaped a run at a time, so that
// what is escaped does not depend on how the renderer split the text.
type inlineText struct {
	out, raw strings.Builder
}

// Text adds text as the page shows it.
func (t *inlineText) Text(s string) { t.raw.WriteString(s) }

// WriteString adds Markdown as it is.
func (t *inlineText) WriteString(s string) {
	t.flush()
	t.out.WriteString(s)
}

func (t *inlineText) flush() {
	t.out.WriteString(escapeText(t.raw.String()))
	t.raw.Reset()
}

func (t *inlineText) String() string {
	t.flush()
	return t.out.String()
}

func (t *inlineText) Reset() {
	t.out.Reset()
	t.raw.Reset()
}

// linkShown reports whether a link's destination is on the page anyway: the link's
// text is its address (an autolink, also percent-encoded), or it is a footnote's.
func linkShown(href, class, text string) bool {
	if strings.TrimSpace(href) == "" || strings.HasPrefix(class, "footnote-ref") {
		return true
	}
	return bareURL(href) == bareURL(text)
}

// bareURL is an address without its scheme, its percent escapes decoded.
func bareURL(s string) string {
	s = strings.TrimSpace(s)
	for _, p := range []string{"mailto:", "http://", "https://"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			s = s[len(p):]
			break
		}
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func plainText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

var (
	// quietValue is a value of a presentational attribute that can hide no words.
	quietValue = regexp.MustCompile(`^(?i)(?:[0-9]{0,6}(?:%|px)?|left|right|center|justify|top|middle|bottom|baseline|ltr|rtl|auto|checkbox|[1aAiI])$`)
	// generated are the attributes the Markdown renderer writes itself.
	generated = regexp.MustCompile(`^(?:class=(?:language-\S+|footnote-ref|footnote-backref|footnotes)|role=doc-(?:noteref|backlink|endnotes)|id=fn(?:ref\d*)?:\d+|href=#fn(?:ref\d*)?:\d+|checked=|disabled=)$`)
	quietAttr = map[string]bool{"width": true, "height": true, "align": true, "valign": true, "colspan": true, "rowspan": true,
		"start": true, "border": true, "cellpadding": true, "cellspacing": true, "dir": true, "open": true, "type": true}
)

// attrs notes the attributes of n that carry text the page does not show.
func (w *visibleWriter) attrs(n *html.Node) {
	for _, a := range n.Attr {
		v := strings.TrimSpace(a.Val)
		switch {
		case v == "", generated.MatchString(a.Key + "=" + v):
		case a.Key == "alt" || a.Key == "title":
			w.note(HiddenImageText)
		case a.Key == "href" && n.DataAtom == atom.A, a.Key == "src" && n.DataAtom == atom.Img:
			// links and images: noted where they are rendered
		case quietAttr[a.Key] && quietValue.MatchString(v):
		default:
			w.note(HiddenAttributes)
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	return slices.ContainsFunc(n.Attr, func(a html.Attribute) bool { return a.Key == key })
}

// escapeText escapes what Markdown would read as markup in text: backslashes, code,
// emphasis, strikethrough, links, HTML and entities, table pipes.
func escapeText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\', '`', '*', '[', ']', '~', '|', '&':
			b.WriteByte('\\')
		case '_':
			if i == 0 || i == len(s)-1 || !isAlnum(s[i-1]) || !isAlnum(s[i+1]) {
				b.WriteByte('\\')
			}
		case '<':
			if i+1 < len(s) && s[i+1] == '!' {
				// "<\!" reads as text too, and never spells the start of a comment.
				b.WriteString(`<\!`)
				i++
				continue
			}
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// lineStart matches what Markdown reads as the start of a block at a line's start.
var lineStart = regexp.MustCompile(`^(?:[#>+=-]|[0-9]{1,9}[.)])`)

// paragraph turns inline text into a paragraph: lines trimmed, blank ones dropped, and a
// line that would start a heading, quote, list or rule escaped.
func paragraph(s string) string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		l = strings.TrimFunc(l, func(r rune) bool { return r == ' ' || r == '\t' })
		if l == "" {
			continue
		}
		if loc := lineStart.FindStringIndex(l); loc != nil {
			l = l[:loc[1]-1] + `\` + l[loc[1]-1:]
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// prefixLines puts first before the first line of s and rest before the others (not
// before blank ones, which stay blank).
func prefixLines(s, first, rest string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		p := rest
		if i == 0 {
			p = first
		}
		if l == "" {
			lines[i] = strings.TrimRight(p, " ")
			continue
		}
		lines[i] = p + l
	}
	return strings.Join(lines, "\n")
}

// codeSpan writes code as a Markdown code span that shows it as it is.
func codeSpan(code string) string {
	code = strings.ReplaceAll(code, "\n", " ")
	if strings.TrimSpace(code) == "" {
		return ""
	}
	ticks := strings.Repeat("`", longestRun(code, '`')+1)
	if code[0] == '`' || code[len(code)-1] == '`' || (code[0] == ' ' && code[len(code)-1] == ' ') {
		code = " " + code + " "
	}
	return ticks + code + ticks
}

func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// visibleRunes drops characters that render as nothing: format characters (zero-width
// spaces and joiners, bidi controls, the BOM, soft hyphens, Unicode tags), variation
// selectors, Hangul fillers and the blank Braille pattern, and control characters but
// tab and newline, and bytes that are not UTF-8. One emoji presentation selector (U+FE0E, U+FE0F) right after a
// visible non-ASCII character stays: it is how ❤️ and ⚠️ are written.
func visibleRunes(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	prev := rune(0)
	for i, r := range s {
		keep := true
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			keep = false
		case r == '\n' || r == '\t':
		case r == 0xFE0E || r == 0xFE0F:
			keep = prev > unicode.MaxASCII && !isSelector(prev)
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), isSelector(r):
			keep = false
		case r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800, r == 0x034F:
			keep = false // Hangul fillers, blank Braille, combining grapheme joiner
		}
		if keep {
			b.WriteRune(r)
			prev = r
		}
	}
	return b.String()
}

func isSelector(r rune) bool {
	return (r >= 0xFE00 && r <= 0xFE0F) || (r >= 0xE0100 && r <= 0xE01EF)
}

// visibleTitle is StripHidden for an issue title, which GitHub shows as plain text:
// only invisible characters can hide anything in it.
func visibleTitle(s string) (string, bool) {
	out := visibleRunes(s)
	return out, out != s
}
