package drift

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// manifestExt reports whether a file name is one drift -f reads in a
// directory: .yaml, .yml or .json, as kubectl does.
func manifestExt(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// ManifestFiles lists the files -f PATH reads: PATH itself when it is a
// file; in a directory its .yaml, .yml and .json files in name order, and
// with recursive those of every subdirectory too (kubectl's -R), hidden
// ones (.git) left out. The notes say what a directory held that was not
// read — subdirectories without recursive, files of other kinds — so a
// tree that looks checked is not silently half read.
func ManifestFiles(path string, recursive bool) (files, notes []string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil, nil
	}
	var subdirs, hidden, others []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == path {
			return nil
		}
		rel, _ := filepath.Rel(path, p)
		switch {
		case d.IsDir() && strings.HasPrefix(d.Name(), "."):
			hidden = append(hidden, rel)
			return filepath.SkipDir
		case d.IsDir() && !recursive:
			subdirs = append(subdirs, rel)
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case manifestExt(d.Name()):
			files = append(files, p)
		default:
			others = append(others, rel)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	if len(subdirs) > 0 {
		notes = append(notes, fmt.Sprintf("-f %s: %d subdirector%s not read (give -R to read them): %s", path, len(subdirs), plural(len(subdirs), "y", "ies"), listSome(subdirs)))
	}
	if len(hidden) > 0 {
		notes = append(notes, fmt.Sprintf("-f %s: hidden director%s not read: %s", path, plural(len(hidden), "y", "ies"), listSome(hidden)))
	}
	if len(others) > 0 {
		notes = append(notes, fmt.Sprintf("-f %s: %d file%s not read (only .yaml, .yml and .json are): %s", path, len(others), plural(len(others), "", "s"), listSome(others)))
	}
	return files, notes, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// listSome names the first few of a list, then how many more.
func listSome(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
}
