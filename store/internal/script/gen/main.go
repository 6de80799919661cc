// Command gen writes every Redis script of the store, assembled as the store
// loads it, to one file each under store/internal/script/assembled, and
// removes the files of scripts that no longer exist. Run it with
// "go generate ./store/internal/script"; a test fails when the files are
// stale.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/throttle-go/throttle/store/internal/script"
)

func main() {
	if err := run(script.Dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run writes the files into dir, relative to store/internal/script (where
// go generate runs this command), leaving unchanged files untouched.
func run(dir string) error {
	files, err := script.Files(script.All())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, ok := files[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, []byte(content)) {
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
