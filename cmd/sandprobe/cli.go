package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/report"
)

// The command tree is cobra's and the flags are pflag's, as in kubectl, helm
// and cilium-cli: --long flags with kubectl's shorthands (-n, -o, -f, -h),
// `sandprobe help COMMAND` and `sandprobe completion SHELL`. Help groups the
// flags by what they are for (backend, outputs, logging) instead of one
// flat list.

// runFunc runs a command once its flags are parsed; it returns the exit code.
type runFunc func(ctx context.Context, args []string) int

// groupAnnotation names the help section a flag is listed in.
const groupAnnotation = "sandprobe/group"

// The help sections, in the order help prints them; flags in none are
// listed first, under "Flags".
const (
	groupFiles   = "Manifest file flags"
	groupLocal   = "Local flags"
	groupDocker  = "Docker flags"
	groupKube    = "Kube flags"
	groupServe   = "Serve flags"
	groupOutputs = "Output flags"
	groupLogging = "Logging flags"
)

var groupOrder = []string{"Flags", groupFiles, groupLocal, groupDocker, groupKube, groupServe, groupOutputs, groupLogging}

// group puts the flags that register adds to fs into a help section.
func group(fs *pflag.FlagSet, title string, register func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	register()
	fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] {
			_ = fs.SetAnnotation(f.Name, groupAnnotation, []string{title})
		}
	})
}

// normalizeFlag maps the spellings Go's flag package knew, before the
// shorthands, to today's names (--o json is --output json), and accepts
// kubectl's tolerated underscores (--log_format).
func normalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "o":
		name = "output"
	case "f":
		name = "filename"
	case "n":
		name = "namespace"
	case "v":
		name = "verbose"
	}
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}

// usageError is a mistake on the command line: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// rootCommand builds the command tree; code receives the exit code of the
// command that ran.
func (a *app) rootCommand(code *int) *cobra.Command {
	root := &cobra.Command{
		Use:                        "sandprobe",
		Short:                      "sandprobe proves that sandboxes are as tight as their policy declares.",
		SilenceErrors:              true,
		SilenceUsage:               true,
		DisableSuggestions:         true, // ours fit on one line: see Run
		SuggestionsMinimumDistance: 2,
		CompletionOptions:          cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetGlobalNormalizationFunc(normalizeFlag)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	defaultHelp := root.HelpFunc()
	byName := map[string]command{}
	for _, c := range commands() {
		byName[c.name] = c
		root.AddCommand(a.cobraCommand(c, code))
	}
	// cobra's completion command, but an unknown shell is a usage error
	// (cobra would print the help and exit 0).
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError{fmt.Errorf("unknown shell %q: want bash, zsh, fish or powershell", args[0])}
				}
				return cmd.Help()
			}
		}
	}
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		switch c, ok := byName[cmd.Name()]; {
		case cmd == root:
			a.usage(cmd.OutOrStdout())
		case ok && cmd.Parent() == root:
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
	return root
}

// cobraCommand wraps one subcommand: its flags on the cobra command, its
// run function called with the exit code kept.
func (a *app) cobraCommand(c command, code *int) *cobra.Command {
	cmd := &cobra.Command{
		Use:   c.name,
		Short: c.summary,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case c.args == 0 && len(args) > 0:
				return usageError{fmt.Errorf("unexpected argument %q", args[0])}
			case len(args) != c.args:
				return usageError{fmt.Errorf("want %s, got %d arguments", c.usage, len(args))}
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	if c.args > 0 {
		cmd.ValidArgsFunction = nil // install DEST: a path
	}
	cmd.SetGlobalNormalizationFunc(normalizeFlag)
	run := c.setup(a, cmd.Flags())
	cmd.InitDefaultHelpFlag()
	registerCompletions(cmd, c.name)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		*code = run(cmd.Context(), args)
		return nil
	}
	return cmd
}

// Run parses the command line and runs the command; it returns the exit code.
func (a *app) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.usage(a.stdout)
		return report.ExitBadInput
	}
	if args[0] == "--version" {
		args = []string{"version"}
	}
	code := report.ExitOK
	root := a.rootCommand(&code)
	if cmd, _, err := root.Find(args[:1]); err == nil && cmd != root {
		args = append(args[:1:1], legacyArgs(cmd.Flags(), args[1:])...)
	} else if !strings.HasPrefix(args[0], "-") && !isCobraCommand(args[0]) {
		msg := fmt.Sprintf("sandprobe: unknown command %q", args[0])
		if s := root.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		fmt.Fprintln(a.stderr, msg+" (see sandprobe help)")
		return report.ExitBadInput
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		name := "sandprobe"
		if cmd != nil && cmd != root {
			name = cmd.CommandPath()
		}
		// Every error cobra returns is about the command line: the
		// commands report their own and return the exit code.
		fmt.Fprintf(a.stderr, "%s: %s\n", name, oneLine(err.Error()))
		return report.ExitBadInput
	}
	return code
}

// isCobraCommand: the commands cobra adds itself (completion and the
// hidden ones its completion scripts call).
func isCobraCommand(name string) bool {
	return name == "help" || name == "completion" || strings.HasPrefix(name, "__complete")
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// legacyArgs rewrites Go's single-dash long flags (-policy FILE,
// -no-network) to pflag's --policy FILE, so the command lines written for
// the flag package keep working. Only a word that names a long flag of the
// command is rewritten; a flag's value (--policy -x) and everything after
// "--" is left alone, and so are shorthands (-o json, -vn ns).
func legacyArgs(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return append(out, args[i:]...)
		}
		if len(arg) < 2 || arg[0] != '-' {
			out = append(out, arg)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		var f *pflag.Flag
		switch {
		case strings.HasPrefix(arg, "--"):
			f = fs.Lookup(name)
		case len(name) > 1 && fs.Lookup(name) != nil:
			f = fs.Lookup(name)
			arg = "-" + arg
		case len(name) == 1:
			f = fs.ShorthandLookup(name)
		}
		out = append(out, arg)
		if f != nil && f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

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
	fmt.Fprint(w, "\nExit codes: 0 conformant, 1 not conformant, 2 bad input or usage, 3 could not run.\n")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
