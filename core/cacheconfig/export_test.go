package cacheconfig

// DTypeAliasSpellings and QuantizationAliasSpellings expose the alias tables'
// keys to the vector test, which checks that the shared vectors cover them.
func DTypeAliasSpellings() []string        { return keys(dtypeAliases) }
func QuantizationAliasSpellings() []string { return keys(quantizationAliases) }

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// IdentityRuleFields lists the field names the weights-identity rule has a
// row for (ExtraPrefix for the extra entries).
func IdentityRuleFields() []string {
	var out []string
	for _, r := range identityRules() {
		out = append(out, r.field)
	}
	return out
}
