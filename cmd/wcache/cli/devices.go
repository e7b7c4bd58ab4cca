package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/sdk"
)

// deviceJSON is one element of `wcache devices --json`.
type deviceJSON struct {
	Ordinal          int    `json:"ordinal"`
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	TotalMemoryBytes uint64 `json:"total_memory_bytes"`
	FreeMemoryBytes  uint64 `json:"free_memory_bytes"`
	PCIBusID         string `json:"pci_bus_id"`
	Capability       string `json:"capability"`
}

func newDevicesCommand(e *env) *cobra.Command {
	var asJSON, describe bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List the devices a backend sees: ordinal, UUID, name, memory",
		Long: "List the devices the backend plugin sees, by ordinal as this process sees them\n" +
			"(CUDA_VISIBLE_DEVICES and friends honoured). The UUID is what keys a daemon's socket.",
		Args: cobra.NoArgs,
	}
	backend := addBackendFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	cmd.Flags().BoolVar(&describe, "describe", false,
		"describe the backend instead: version, API version, handle kinds and the --backend-opt keys with their types, defaults and variables")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		p, err := backend.start(ctx, e)
		if err != nil {
			return err
		}
		defer p.Close()
		if describe {
			return describeBackend(ctx, e.stdout, p, asJSON)
		}
		devs, err := p.Backend().Devices(ctx)
		if err != nil {
			return fmt.Errorf("list devices of backend %q: %w", p.Name(), err)
		}
		if asJSON {
			return printDevicesJSON(e.stdout, devs)
		}
		return printDevicesTable(e.stdout, devs)
	}
	return cmd
}

func printDevicesJSON(w io.Writer, devs []sdk.Device) error {
	out := make([]deviceJSON, len(devs))
	for i, d := range devs {
		out[i] = deviceJSON{
			Ordinal:          d.Ordinal,
			UUID:             d.UUID,
			Name:             d.Name,
			TotalMemoryBytes: d.TotalMemory,
			FreeMemoryBytes:  d.FreeMemory,
			PCIBusID:         d.PCIBusID,
			Capability:       d.Capability,
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func printDevicesTable(w io.Writer, devs []sdk.Device) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDINAL\tUUID\tNAME\tMEMORY\tFREE\tCAPABILITY")
	for _, d := range devs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", d.Ordinal, d.UUID, d.Name,
			humanBytes(d.TotalMemory), humanBytes(d.FreeMemory), d.Capability)
	}
	return tw.Flush()
}
