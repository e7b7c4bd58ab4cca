package sdk

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the host → plugin configuration: a backend declares a
// schema (Options), the host sends --backend-opt KEY=VALUE pairs through
// the Configure RPC (backend API version 2), and the sdk resolves them
// against the schema before the backend sees them. See
// docs/writing-a-backend.md, "Options".

// OptionType says how an option's value is parsed.
type OptionType string

// The option types. A value that does not parse as its type is refused
// before the backend sees it.
const (
	OptionString   OptionType = "string"
	OptionInt      OptionType = "int"      // strconv.ParseInt, base 10
	OptionBool     OptionType = "bool"     // strconv.ParseBool: 1, 0, true, false
	OptionSize     OptionType = "size"     // ParseSize: 4096, 16MiB, 8G
	OptionDuration OptionType = "duration" // time.ParseDuration, or "0"
)

// Option is one key of a backend's configuration schema.
type Option struct {
	// Name is the KEY of --backend-opt KEY=VALUE: 1 to 64 lowercase ASCII
	// letters, digits and '-', starting with a letter.
	Name string
	Type OptionType
	// Default is the value used when neither the option nor Env is set,
	// as shown by `wcache devices --describe`; "" when there is none or
	// the backend computes it at run time (say so in Description).
	Default     string
	Description string
	// Env is the environment variable read when the option is not given
	// ("": none). Precedence: --backend-opt, then Env, then Default.
	Env string
}

// Source says where a resolved value came from.
type Source string

// The sources, in precedence order.
const (
	SourceOption  Source = "option"  // --backend-opt (the Configure call)
	SourceEnv     Source = "env"     // the option's environment variable
	SourceDefault Source = "default" // Option.Default
)

// Config is a resolved configuration: for every option of a schema its
// value (already checked against the option's type) and its source. The
// zero Config has no options.
type Config struct {
	schema  []Option
	values  map[string]string
	sources map[string]Source
	getenv  func(string) string
}

// ResolveConfig checks given (the host's KEY=VALUE pairs) against schema
// and resolves every option: given value, else getenv(Env) when not blank,
// else Default. A key the schema lacks, or a value (given or from the
// environment) that does not parse as its type, is ErrInvalidArgument
// naming the key and the known keys. getenv nil → os.Getenv. A schema
// with a malformed or duplicate option is an error too (the backend's
// bug, reported the same way).
func ResolveConfig(schema []Option, given map[string]string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if err := ValidateSchema(schema); err != nil {
		return Config{}, err
	}
	known := make([]string, len(schema))
	for i, o := range schema {
		known[i] = o.Name
	}
	var unknown []string
	for k := range given {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		list := "none: this backend declares no options"
		if len(known) > 0 {
			list = strings.Join(known, ", ")
		}
		return Config{}, Errorf(ErrInvalidArgument, "unknown backend option %s (known: %s)",
			quoteList(unknown), list)
	}
	c := Config{schema: slices.Clone(schema), values: map[string]string{}, sources: map[string]Source{}, getenv: getenv}
	for _, o := range schema {
		v, src := o.Default, SourceDefault
		if g, ok := given[o.Name]; ok {
			v, src = g, SourceOption
		} else if o.Env != "" && strings.TrimSpace(getenv(o.Env)) != "" {
			v, src = strings.TrimSpace(getenv(o.Env)), SourceEnv
		}
		if v != "" || src == SourceOption {
			if err := checkValue(o.Type, v); err != nil {
				where := "--backend-opt " + o.Name + "=" + strconv.Quote(v)
				switch src {
				case SourceEnv:
					where = o.Env + "=" + strconv.Quote(v)
				case SourceDefault:
					where = "the default of option " + o.Name
				}
				return Config{}, Errorf(ErrInvalidArgument, "%s: want a %s: %v", where, o.Type, err)
			}
		}
		c.values[o.Name], c.sources[o.Name] = v, src
	}
	return c, nil
}

// ValidateSchema checks a schema: names well formed and unique, types
// known, defaults of their type.
func ValidateSchema(schema []Option) error {
	seen := map[string]bool{}
	for _, o := range schema {
		if !validOptionName(o.Name) {
			return Errorf(ErrInvalidArgument, "backend option name %q: want 1 to 64 lowercase letters, digits and '-', starting with a letter", o.Name)
		}
		if seen[o.Name] {
			return Errorf(ErrInvalidArgument, "backend option %q declared twice", o.Name)
		}
		seen[o.Name] = true
		if err := checkValue(o.Type, ""); err != nil && err != errEmpty {
			return Errorf(ErrInvalidArgument, "backend option %q: %v", o.Name, err)
		}
		if o.Default != "" {
			if err := checkValue(o.Type, o.Default); err != nil {
				return Errorf(ErrInvalidArgument, "backend option %q: default %q is not a %s: %v", o.Name, o.Default, o.Type, err)
			}
		}
	}
	return nil
}

var errEmpty = fmt.Errorf("empty value")

// checkValue parses v as t; "" is errEmpty for every type but string.
func checkValue(t OptionType, v string) error {
	switch t {
	case OptionString:
		return nil
	case OptionInt, OptionBool, OptionSize, OptionDuration:
	default:
		return fmt.Errorf("unknown option type %q (want string, int, bool, size or duration)", t)
	}
	if v == "" {
		return errEmpty
	}
	var err error
	switch t {
	case OptionInt:
		_, err = strconv.ParseInt(v, 10, 64)
	case OptionBool:
		_, err = strconv.ParseBool(v)
	case OptionSize:
		_, err = ParseSize(v)
	case OptionDuration:
		if v != "0" {
			_, err = time.ParseDuration(v)
		}
	}
	return err
}

func validOptionName(n string) bool {
	if n == "" || len(n) > 64 || n[0] < 'a' || n[0] > 'z' {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}

// Options is the schema the Config was resolved against.
func (c Config) Options() []Option { return slices.Clone(c.schema) }

// Value is the resolved value of option name ("" when unset everywhere,
// or when the schema has no such option).
func (c Config) Value(name string) string { return c.values[name] }

// Source is where option name's value came from ("" for an unknown name).
func (c Config) Source(name string) Source { return c.sources[name] }

// Given returns the values the host set (--backend-opt), by name.
func (c Config) Given() map[string]string {
	out := map[string]string{}
	for k, src := range c.sources {
		if src == SourceOption {
			out[k] = c.values[k]
		}
	}
	return out
}

// Getenv is a getenv function for a backend that reads its configuration
// from environment variables (ConfigFromEnv(cfg.Getenv)): for the variable
// of an option it returns the option's value when given, else the
// variable; every other variable reads through the getenv the Config was
// resolved with (os.Getenv for the zero Config). The backend's own parsing and defaults
// thus stay the single source, and --backend-opt wins over the variable.
func (c Config) Getenv(name string) string {
	for _, o := range c.schema {
		if o.Env == name && c.sources[o.Name] == SourceOption {
			return c.values[o.Name]
		}
	}
	if c.getenv == nil {
		return os.Getenv(name)
	}
	return c.getenv(name)
}

// Int is option name's value as an integer (0 when unset).
func (c Config) Int(name string) int64 {
	n, _ := strconv.ParseInt(c.values[name], 10, 64)
	return n
}

// Bool is option name's value as a boolean (false when unset).
func (c Config) Bool(name string) bool {
	b, _ := strconv.ParseBool(c.values[name])
	return b
}

// Size is option name's value in bytes (0 when unset).
func (c Config) Size(name string) uint64 {
	n, _ := ParseSize(c.values[name])
	return n
}

// Duration is option name's value (0 when unset).
func (c Config) Duration(name string) time.Duration {
	d, _ := time.ParseDuration(c.values[name])
	return d
}

// Configurable is implemented by a backend that takes options. The sdk
// resolves the host's values against Options (unknown keys and malformed
// values never reach Configure) and calls Configure once, before any other
// call from a host of API version 2. A backend that must know its options
// before it can be built is served with sdk/plugin.WithSchema instead.
type Configurable interface {
	// Options is the schema; it must not change while the plugin runs.
	Options() []Option
	// Configure applies cfg. An error ends the plugin's start: the host
	// prints it and stops the plugin.
	Configure(ctx context.Context, cfg Config) error
}

// ValueConfigurer is the host's side of Configure: it sends the values
// unresolved and the plugin resolves them (the gRPC client adapter's Backend
// implements it).
type ValueConfigurer interface {
	ConfigureValues(ctx context.Context, values map[string]string) error
}

// Configure configures b with the host's values: across the plugin
// boundary through ValueConfigurer, in process through Configurable (the
// values resolved with ResolveConfig and os.Getenv). A backend that is
// neither accepts no values: an empty map is nil, any key is
// ErrInvalidArgument.
func Configure(ctx context.Context, b Backend, values map[string]string) error {
	switch c := b.(type) {
	case ValueConfigurer:
		return c.ConfigureValues(ctx, values)
	case Configurable:
		cfg, err := ResolveConfig(c.Options(), values, nil)
		if err != nil {
			return err
		}
		return c.Configure(ctx, cfg)
	default:
		_, err := ResolveConfig(nil, values, nil)
		return err
	}
}

// OptionsOf returns b's schema: Info's options across the plugin boundary,
// Configurable.Options in process, nil otherwise.
func OptionsOf(ctx context.Context, b Backend) ([]Option, error) {
	if c, ok := b.(Configurable); ok {
		return c.Options(), nil
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, err
	}
	return info.Options, nil
}
