package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sandprobe/sandprobe/admission"
	"github.com/sandprobe/sandprobe/runner/local"
)

// flagValues are the values shell completion offers for a flag, by
// command; "" holds those that mean the same in every command.
func flagValues(cmd string) map[string][]string {
	v := map[string][]string{
		"backend":           {"local", "docker", "kube"},
		"log-format":        {"text", "json"},
		"output":            {"text", "json", "junit"},
		"image-pull-policy": {"Always", "IfNotPresent", "Never"},
		"sabotage":          local.SabotageNames(),
		"runtime":           {"runc", "runsc", "kata"},
		"egress":            {"networkpolicy", "cilium", "networkpolicy,cilium"},
		"mode":              {admission.ModeDeny, admission.ModeWarn, admission.ModeAudit, admission.ModeWarn + "," + admission.ModeAudit},
		"format":            {"yaml", "admission", "rbac", "docker", "docker-json", "proxy-allowlist"},
	}
	switch cmd {
	case "checks":
		v["output"] = []string{"text", "json", "markdown"}
	case "probe":
		v["output"] = []string{"json", "text"}
	case "drift":
		v["output"] = []string{"text", "json", "junit", "sarif"}
	}
	return v
}

// registerCompletions teaches completion the values of cmd's flags; a flag
// with none completes file names, the shell's default.
func registerCompletions(cmd *cobra.Command, name string) {
	for flag, values := range flagValues(name) {
		if cmd.Flags().Lookup(flag) == nil {
			continue
		}
		values := slices.Clone(values)
		_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	if cmd.Flags().Lookup("context") != nil {
		_ = cmd.RegisterFlagCompletionFunc("context", kubeContexts)
	}
	// Files by what they hold: a policy is YAML; drift reads manifests
	// (YAML or JSON) and docker inspect output (JSON).
	files := map[string][]string{"policy": {"yaml", "yml"}}
	switch name {
	case "validate":
		files["filename"] = []string{"yaml", "yml"}
	case "drift":
		files["filename"] = []string{"yaml", "yml", "json"}
		files["inspect"] = []string{"json"}
	}
	for flag, exts := range files {
		if cmd.Flags().Lookup(flag) != nil {
			_ = cmd.MarkFlagFilename(flag, exts...)
		}
	}
	if cmd.Flags().Lookup("namespace") != nil {
		_ = cmd.RegisterFlagCompletionFunc("namespace", kubeNamespaces)
	}
	for _, flag := range []string{"netns", "control-netns"} {
		if cmd.Flags().Lookup(flag) != nil {
			_ = cmd.RegisterFlagCompletionFunc(flag, netnsNames)
		}
	}
}

// netnsNames completes the local backend's named network namespaces
// (ip netns add NAME puts them in /run/netns).
func netnsNames(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	entries, _ := os.ReadDir("/run/netns")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completionCommand is cobra's completion command, but an unknown shell is
// a usage error (cobra would print the help and exit 0).
func completionCommand(root *cobra.Command) {
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
}
