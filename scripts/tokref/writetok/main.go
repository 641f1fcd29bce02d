// Command writetok writes a generated test tokenizer.json (testgen: bert
// or bpe) to a directory, for scripts/tokref/gen.mjs.
package main

import (
	"fmt"
	"os"

	"github.com/precog-ml/precog/internal/testgen"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "bert" && os.Args[1] != "bpe") {
		fmt.Fprintln(os.Stderr, "usage: writetok bert|bpe DIR")
		os.Exit(2)
	}
	write := testgen.WriteBertTokenizer
	if os.Args[1] == "bpe" {
		write = testgen.WriteBPETokenizer
	}
	p, err := write(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(p)
}
