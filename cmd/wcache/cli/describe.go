package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/wcache/wcache/core/pluginhost"
	"github.com/wcache/wcache/sdk"
)

// describeJSON is `wcache devices --describe --json`.
type describeJSON struct {
	Name        string       `json:"name"`
	Version     string       `json:"version"`
	Platform    string       `json:"platform"`
	Path        string       `json:"path"`
	APIVersion  int          `json:"api_version"`
	HandleKinds []string     `json:"handle_kinds"`
	Options     []optionJSON `json:"options"`
}

type optionJSON struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Default     string `json:"default"`
	Env         string `json:"env,omitempty"`
	Description string `json:"description"`
}

// describeBackend prints what the plugin says about itself: Info and its
// option schema (empty for a plugin of API version 1).
func describeBackend(ctx context.Context, w io.Writer, p *pluginhost.Plugin, asJSON bool) error {
	info, err := p.Backend().Info(ctx)
	if err != nil {
		return fmt.Errorf("describe backend %q: %w", p.Name(), err)
	}
	if asJSON {
		out := describeJSON{Name: info.Name, Version: info.Version, Platform: info.Platform, Path: p.Path(),
			APIVersion: p.APIVersion(), HandleKinds: info.HandleKinds, Options: []optionJSON{}}
		for _, o := range info.Options {
			out.Options = append(out.Options, optionJSON{Name: o.Name, Type: string(o.Type), Default: o.Default,
				Env: o.Env, Description: o.Description})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "backend %s %s (platform %s, backend API version %d)\n", info.Name, info.Version, info.Platform, p.APIVersion())
	fmt.Fprintf(w, "plugin: %s\nhandle kinds: %s\n", p.Path(), strings.Join(info.HandleKinds, ", "))
	switch {
	case p.APIVersion() < 2:
		fmt.Fprintf(w, "options: none (the plugin speaks backend API version %d, which has no --backend-opt)\n", p.APIVersion())
		return nil
	case len(info.Options) == 0:
		fmt.Fprintln(w, "options: none (the plugin declares no --backend-opt keys)")
		return nil
	}
	fmt.Fprintln(w, "options (--backend-opt KEY=VALUE, which wins over the variable, which wins over the default):")
	return printOptions(w, info.Options)
}

func printOptions(w io.Writer, opts []sdk.Option) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTYPE\tDEFAULT\tVARIABLE\tDESCRIPTION")
	for _, o := range opts {
		def, env := o.Default, o.Env
		if def == "" {
			def = "-"
		}
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Name, o.Type, def, env, o.Description)
	}
	return tw.Flush()
}
