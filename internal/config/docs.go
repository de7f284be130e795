package config

import (
	"fmt"
	"slices"
	"strings"
)

// defaultText is the default as docs show it, "" when there is none.
func (v Var) defaultText() string {
	if v.DefaultText != "" {
		return v.DefaultText
	}
	return v.Default
}

// displayName is the name as docs show it: a secret names its _FILE twin too.
func (v Var) displayName() string {
	if v.Kind == KindSecret {
		return fmt.Sprintf("%s or %s_FILE", v.Name, v.Name)
	}
	return string(v.Name)
}

func (v Var) kindText() string {
	if v.Kind == KindEnum {
		return strings.Join(v.Values, " \\| ")
	}
	return string(v.Kind)
}

// Help is the environment section of a command's --help: every variable it reads, with
// its kind and default, and one line of doc.
func Help(c Command) string {
	var b strings.Builder
	for _, v := range Vars() {
		if !v.readsFor(c) {
			continue
		}
		kind := string(v.Kind)
		if v.Kind == KindEnum {
			kind = strings.Join(v.Values, "|")
		}
		if def := v.defaultText(); def != "" {
			kind += ", default " + def
		}
		fmt.Fprintf(&b, "  %s (%s)\n      %s\n", v.displayName(), kind, strings.ReplaceAll(v.Doc, "`", ""))
	}
	return b.String()
}

// Markdown is the generated table of docs/configuration.md: one table per section.
func Markdown() string {
	var b strings.Builder
	vars := Vars()
	for i, sec := range Sections() {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "**%s**\n\n", sec)
		b.WriteString("| variable | kind | default | read by | meaning |\n|---|---|---|---|---|\n")
		for _, v := range vars {
			if v.Section != sec {
				continue
			}
			def := v.defaultText()
			if v.Default != "" && v.DefaultText == "" {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n",
				strings.ReplaceAll(v.displayName(), " or ", "` or `"), v.kindText(), def, commandsText(v.Commands),
				strings.ReplaceAll(v.Doc, "|", "\\|"))
		}
	}
	return b.String()
}

func commandsText(cs []Command) string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		if c == Any {
			names = append(names, "every whilly command")
			continue
		}
		names = append(names, string(c))
	}
	return strings.Join(slices.Compact(names), ", ")
}
