// Command sbom writes the CycloneDX bill of materials of a built Go binary
// (internal/sbom), for make release (hack/release.sh):
//
//	go run ./hack/sbom [--name NAME] [--version V] [--created UNIX] BINARY > BINARY.cdx.json
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sandprobe/sandprobe/internal/sbom"
)

func main() {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	name := fs.String("name", "", "the application's name (default: the binary's file name)")
	version := fs.String("version", "", "the release version (default: the main module's recorded version)")
	created := fs.Int64("created", 0, "the BOM's timestamp, Unix seconds (SOURCE_DATE_EPOCH); 0 leaves it out")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "sbom: want one binary")
		os.Exit(2)
	}
	o := sbom.Options{Name: *name, Version: *version}
	if *created != 0 {
		o.Created = time.Unix(*created, 0)
	}
	bom, err := sbom.File(fs.Arg(0), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
	if err := sbom.Write(os.Stdout, bom); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}
