package drift

import (
	"strconv"
	"strings"
)

// Values as findings spell them.

func boolText(b *bool) string {
	if b == nil {
		return "unset"
	}
	return strconv.FormatBool(*b)
}

func int64Text(v *int64, unset string) string {
	if v == nil {
		return unset
	}
	return strconv.FormatInt(*v, 10)
}

func int64List(vs []int64) string {
	if len(vs) == 0 {
		return "none"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
