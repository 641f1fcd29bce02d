// Command writetok writes the generated test tokenizer.json (testgen) to a
// directory, for scripts/tokref/gen.mjs.
package main

import (
	"fmt"
	"os"

	"github.com/precog-ml/precog/internal/testgen"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: writetok DIR")
		os.Exit(2)
	}
	p, err := testgen.WriteBertTokenizer(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(p)
}
