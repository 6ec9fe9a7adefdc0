// Command tolaria-gen writes the monitoring files generated from
// telemetry.Thresholds: infra/prometheus/alert_rules.yml, its promtool tests
// and infra/grafana/dashboards/tolaria.json.
//
//	tolaria-gen [-out DIR]
//
// DIR is the repository root the file paths are relative to (default ".").
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/telemetry/infragen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tolaria-gen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tolaria-gen", flag.ContinueOnError)
	out := fs.String("out", ".", "repository root to write the generated files under")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; the only flag is -out DIR", fs.Args())
	}
	files, err := infragen.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		dst := filepath.Join(*out, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, f.Data, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", dst)
	}
	return nil
}
