// Command stamped prints its build, for TestStamped.
package main

import (
	"fmt"

	"github.com/sandprobe/sandprobe/internal/version"
)

func main() { fmt.Println(version.Get().String()) }
