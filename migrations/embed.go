// Package migrations embeds the project's numbered SQL migrations so the
// bothy binary carries its own schema. Files are named NNNN_name.sql and
// applied in numeric order, each in a transaction of its own, or alone
// outside one when its first line is "-- bothy:no-transaction"; River's
// tables come from rivermigrate instead. A landed file is never edited: the
// database records its checksum and refuses a binary whose file differs.
// How to write one: ops/upgrades.md.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this directory.
//
//go:embed *.sql
var FS embed.FS
