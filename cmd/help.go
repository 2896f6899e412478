package cmd

import (
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inferhq/infer/internal/suggest"
	"github.com/inferhq/infer/loadgen/tui"
)

// helpWidth is the width help is wrapped to: the terminal's (within
// bounds), 80 when the help goes elsewhere.
func helpWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if n := tui.Width(f); n > 0 {
			return min(max(n, 60), 160)
		}
	}
	return 80
}

// flagGroup is the annotation that files a flag under a heading in help.
const flagGroup = "infer_group"

// groupFlags files flags of cmd under headings (a heading and the flags'
// names), in order; flags not named go under "Other flags".
func groupFlags(cmd *cobra.Command, groups ...[2]string) {
	var order []string
	for _, g := range groups {
		order = append(order, g[0])
		for name := range strings.FieldsSeq(g[1]) {
			if cmd.Flags().Lookup(name) == nil {
				panic("groupFlags: no flag --" + name) // a programming error, caught by the help tests
			}
			_ = cmd.Flags().SetAnnotation(name, flagGroup, []string{g[0]})
		}
	}
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[flagGroup] = strings.Join(order, "\x00")
}

// flagUsages renders cmd's local flags wrapped to the help's width, under
// their groups' headings when they have any.
func flagUsages(cmd *cobra.Command) string {
	width := helpWidth(cmd.OutOrStdout())
	var order []string
	sets := map[string]*pflag.FlagSet{}
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		g := "Flags"
		if a := f.Annotations[flagGroup]; len(a) > 0 {
			g = a[0] + " flags"
		}
		if sets[g] == nil {
			sets[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
			order = append(order, g)
		}
		sets[g].AddFlag(f)
	})
	if len(order) > 1 {
		// The groups in the order groupFlags gave; the rest last.
		order = order[:0]
		for a := range strings.SplitSeq(cmd.Annotations[flagGroup], "\x00") {
			if g := a + " flags"; sets[g] != nil {
				order = append(order, g)
			}
		}
		if sets["Flags"] != nil {
			sets["Other flags"] = sets["Flags"]
			order = append(order, "Other flags")
		}
	}
	var b strings.Builder
	for i, g := range order {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(g + ":\n")
		b.WriteString(strings.TrimRight(sets[g].FlagUsagesWrapped(width), " \n") + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// usageTemplate is cobra's, with the local flags wrapped and grouped.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

{{flagUsages .}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

// unknownFlag adds a suggestion to pflag's "unknown flag: --batchh": the
// closest of cmd's flags, if one is close.
func unknownFlag(cmd *cobra.Command, msg string) string {
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return msg
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if s := suggest.Closest(name, names); s != "" {
		return msg + " (did you mean --" + s + "?)"
	}
	return msg
}
