// Package stories260k embeds llama2.c's stories260K checkpoint and its
// tokenizer (MIT License, Copyright (c) 2023 Andrej Karpathy; see LICENSE
// and README.md), so that the built-in model needs no download.
package stories260k

import _ "embed"

// Name is the model's name as clients address it.
const Name = "stories260k"

// Checkpoint is stories260K.bin, a llama2.c checkpoint in the legacy
// (version 0) format. It must not be modified.
//
//go:embed stories260K.bin
var Checkpoint []byte

// Tokenizer is tok512.bin, the checkpoint's tokenizer in llama2.c's format.
// It must not be modified.
//
//go:embed tok512.bin
var Tokenizer []byte

// License is the MIT License of llama2.c, under which both files are
// published.
//
//go:embed LICENSE
var License string
