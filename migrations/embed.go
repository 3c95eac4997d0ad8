// Package migrations embeds the project's numbered SQL migrations so the
// bothy binary carries its own schema. Files are named NNNN_name.sql and
// applied in numeric order; River's tables come from rivermigrate instead.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this directory.
//
//go:embed *.sql
var FS embed.FS
