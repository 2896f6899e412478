// Command infer serves a model through a naive and a dynamically batched
// endpoint, load-tests inference servers, and reports the results.
package main

import (
	"os"

	"github.com/inferhq/infer/cmd"
)

func main() { os.Exit(cmd.Main()) }
