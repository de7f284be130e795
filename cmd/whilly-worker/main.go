// Command whilly-worker is the slim remote worker: it claims tasks from a whilly control
// plane over HTTP and runs a coding agent on each. Its import graph holds no database,
// River, router or GitHub App code.
package main

import (
	"fmt"
	"os"
)

const usage = `whilly-worker --connect URL --token T [--plan ID] [--agent NAME] [--once | --drain] [--insecure]

The remote worker of whilly. It is not built yet: this binary only prints its usage.
Run plans locally with 'whilly run --plan ID' once available.
`

func main() {
	fmt.Fprint(os.Stderr, usage)
	for _, a := range os.Args[1:] {
		if a == "-h" || a == "--help" {
			os.Exit(0)
		}
	}
	os.Exit(2)
}
