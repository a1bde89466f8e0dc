package policy

import "strconv"

// DockerBytes writes a byte count in the largest unit Docker reads that
// holds it whole (6g, 512m, 64k; else bytes): --memory and a tmpfs size
// read as a person writes them, and mean exactly the policy's quantity.
// render writes the docker run flags with it and drift's fixes name them.
func DockerBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
