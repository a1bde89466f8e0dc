package main

import (
	"strings"

	"github.com/spf13/pflag"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (s *stringList) Type() string { return "stringArray" }

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

var groupOrder = []string{"Flags", groupFiles, groupLocal, groupDocker, groupKube, groupCache, groupServe, groupOutputs, groupLogging}

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
