package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Help: the command list, and each command's flags in sections (group
// puts a flag in one) instead of one flat list.

// commandHelp prints a command's help: what it does, how to call it, and
// its flags by section.
func commandHelp(w io.Writer, cmd *cobra.Command, c command) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  sandprobe %s %s\n", upperFirst(c.summary), c.name, c.usage)
	sections := map[string]*pflag.FlagSet{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		title := "Flags"
		if g := f.Annotations[groupAnnotation]; len(g) > 0 {
			title = g[0]
		}
		if sections[title] == nil {
			sections[title] = pflag.NewFlagSet(title, pflag.ContinueOnError)
		}
		sections[title].AddFlag(f)
	})
	titles := slices.Clone(groupOrder)
	var extra []string
	for t := range sections {
		if !slices.Contains(titles, t) {
			extra = append(extra, t)
		}
	}
	sort.Strings(extra)
	for _, t := range append(titles, extra...) {
		if fs := sections[t]; fs != nil {
			fmt.Fprintf(w, "\n%s:\n%s", t, fs.FlagUsages())
		}
	}
	fmt.Fprint(w, "\n"+exitFooter(c.name)+"\n")
}

// exitCodesConformance is what a command that judges sandboxes exits with.
const exitCodesConformance = "Exit codes: 0 conformant, 1 not conformant, 2 bad input or usage, 3 could not run."

// exitFooters are the exit codes of the commands that do not judge
// sandboxes, each in its own words; the others exit as
// exitCodesConformance says.
var exitFooters = map[string]string{
	"serve":          "Exit codes (when it stops): 0 stopped by SIGINT or SIGTERM, 2 bad input or usage, 3 could not serve.",
	"validate":       "Exit codes: 0 valid, 2 invalid (each problem with its file, line and YAML path) or bad usage, 3 could not run.",
	"render":         "Exit codes: 0 rendered, 2 bad input or usage (one line per problem), 3 could not write.",
	"checks":         "Exit codes: 0 listed, 2 bad usage, 3 could not write.",
	"version":        "Exit codes: 0 printed, 2 bad usage, 3 could not write.",
	"copy-self":      "Exit codes: 0 copied, 2 bad usage, 3 could not copy.",
	"cache seal":     "Exit codes: 0 sealed, 2 bad input or usage, 3 could not seal.",
	"cache verify":   "Exit codes: 0 the cache matches its seal, 1 it does not, 2 bad input or usage, 3 could not run.",
	"scan-workspace": "Exit codes: 0 nothing on the workspace would run or change how tools run beyond the baseline, 1 something would, 2 bad input or usage, 3 could not run.",
}

// exitFooter is a command's exit codes.
func exitFooter(name string) string {
	if f, ok := exitFooters[name]; ok {
		return f
	}
	return exitCodesConformance
}

// groupHelp prints the help of a command that groups subcommands.
func groupHelp(w io.Writer, c command) {
	fmt.Fprintf(w, "%s\n\nUsage:\n", upperFirst(c.summary))
	subs := subcommands()[c.name]
	for _, s := range subs {
		fmt.Fprintf(w, "  sandprobe %s %s %s\n", c.name, s.name, s.usage)
	}
	fmt.Fprint(w, "\nCommands:\n")
	for _, s := range subs {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, "\nRun `sandprobe help %s COMMAND` for a command's flags and exit codes.\n", c.name)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "sandprobe proves that sandboxes are as tight as their policy declares.\n\nUsage: sandprobe COMMAND [flags]\n\nCommands:\n")
	cmds := append(commands(),
		command{name: "completion", summary: "print the shell completion script: sandprobe completion bash|zsh|fish|powershell"},
		command{name: "help", summary: "help about a command: sandprobe help COMMAND"})
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExit codes of the commands that judge sandboxes (run, drift, verify-image, …): 0 conformant, 1 not conformant,\n2 bad input or usage, 3 could not run. Run `sandprobe help COMMAND` (or `sandprobe COMMAND -h`) for a\ncommand's flags and its exit codes.\n")
}

// setHelp makes help ours: the command list for the root, the grouped
// flags for a subcommand (help.go: commandHelp), cobra's text for the
// completion commands; and `sandprobe help COMMAND` a usage error for an
// unknown topic.
func (a *app) setHelp(root *cobra.Command, byName map[string]command) {
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		switch c, ok := byName[strings.TrimPrefix(cmd.CommandPath(), root.Name()+" ")]; {
		case cmd == root:
			a.usage(cmd.OutOrStdout())
		case ok && c.setup == nil:
			groupHelp(cmd.OutOrStdout(), c)
		case ok:
			commandHelp(cmd.OutOrStdout(), cmd, c)
		default: // completion and its shells: cobra's own text
			defaultHelp(cmd, args)
		}
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]",
		Short: "help about any command",
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []string
			for _, c := range commands() {
				names = append(names, c.name+"\t"+c.summary)
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("unknown help topic %q (see sandprobe help)", strings.Join(args, " "))}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	})
}
