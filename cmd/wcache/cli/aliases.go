package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagAlias returns the wcache flag that an engine's flag name means, and
// whether name is such an alias. The aliases are the spellings ML engineers
// already type into vLLM and SGLang for the same thing; each maps to a flag
// of the same meaning and type, never to a near miss.
func flagAlias(name string) (string, bool) {
	switch name {
	case "model-path": // SGLang
		return "model", true
	case "tensor-parallel-size", "tp": // vLLM, SGLang (--tp)
		return "tp-size", true
	case "pipeline-parallel-size", "pp":
		return "pp-size", true
	case "data-parallel-size", "dp":
		return "dp-size", true
	case "expert-parallel-size", "ep":
		return "ep-size", true
	case "speculative-model", "speculative-draft-model-path": // vLLM, SGLang
		return "draft-model", true
	}
	return "", false
}

// aliasNames lists the aliases of canonical, in a fixed order.
func aliasNames(canonical string) []string {
	var out []string
	for _, a := range []string{"model-path", "tensor-parallel-size", "tp", "pipeline-parallel-size", "pp",
		"data-parallel-size", "dp", "expert-parallel-size", "ep", "speculative-model", "speculative-draft-model-path"} {
		if c, _ := flagAlias(a); c == canonical {
			out = append(out, a)
		}
	}
	return out
}

// normalizeFlagName is the flag sets' normalisation function: '_' is read
// as '-' (--tp_size is --tp-size, as Python configs spell it) and an alias
// is read as the flag it means. pflag's errors still name the flag as it
// was typed.
func normalizeFlagName(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	name = strings.ReplaceAll(name, "_", "-")
	if c, ok := flagAlias(name); ok {
		return pflag.NormalizedName(c)
	}
	return pflag.NormalizedName(name)
}

// installAliases makes every command of root accept the aliases and notes
// them in the help text of the flags they stand for.
func installAliases(root *cobra.Command) {
	root.SetGlobalNormalizationFunc(normalizeFlagName)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if a := aliasNames(f.Name); len(a) > 0 && !strings.Contains(f.Usage, "(also --") {
				f.Usage += " (also --" + strings.Join(a, ", --") + ")"
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// flagCandidates are the names a mistyped flag of cmd may have meant: its
// flags and the aliases of those, each paired with the flag to suggest.
func flagCandidates(cmd *cobra.Command) map[string]string {
	out := map[string]string{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		out[f.Name] = f.Name
		for _, a := range aliasNames(f.Name) {
			out[a] = f.Name
		}
	})
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { out[f.Name] = f.Name })
	return out
}

// sortedKeys returns m's keys in order (for deterministic suggestions).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
