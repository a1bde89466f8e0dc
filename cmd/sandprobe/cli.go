package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandprobe/sandprobe/report"
)

// The command tree is cobra's and the flags are pflag's, as in kubectl, helm
// and cilium-cli: --long flags with kubectl's shorthands (-n, -o, -f, -h),
// `sandprobe help COMMAND` and `sandprobe completion SHELL`. Help groups the
// flags by what they are for (backend, outputs, logging) instead of one
// flat list.

// runFunc runs a command once its flags are parsed; it returns the exit code.
type runFunc func(ctx context.Context, args []string) int

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
	byName := map[string]command{}
	for _, c := range commands() {
		byName[c.name] = c
		cmd := a.cobraCommand(c, code)
		root.AddCommand(cmd)
		for _, sub := range subcommands()[c.name] {
			full := sub
			full.name = c.name + " " + sub.name
			byName[full.name] = full
			child := a.cobraCommand(sub, code)
			child.SetGlobalNormalizationFunc(normalizeFlag)
			cmd.AddCommand(child)
		}
	}
	completionCommand(root)
	a.setHelp(root, byName)
	return root
}

// cobraCommand wraps one subcommand: its flags on the cobra command, its
// run function called with the exit code kept.
func (a *app) cobraCommand(c command, code *int) *cobra.Command {
	cmd := &cobra.Command{
		Use:     c.name,
		Short:   c.summary,
		Aliases: commandAliases[c.name],
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
	if subs := subcommands()[c.name]; len(subs) > 0 {
		names := make([]string, len(subs))
		for i, s := range subs {
			names[i] = s.name
		}
		cmd.ValidArgsFunction = nil
		cmd.Args = nil
		cmd.RunE = func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown subcommand %q: want %s", args[0], strings.Join(names, " or "))}
			}
			return usageError{fmt.Errorf("want a subcommand: %s", strings.Join(names, " or "))}
		}
		cmd.InitDefaultHelpFlag()
		return cmd
	}
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
		n := 1
		if cmd.HasSubCommands() && len(args) > 1 {
			if sub, _, err := cmd.Find(args[1:2]); err == nil && sub != cmd {
				cmd, n = sub, 2
			}
		}
		args = append(args[:n:n], legacyArgs(cmd.Flags(), args[n:])...)
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
