package dbmigrate

// UpFS and GetStatusFS run Up and GetStatus on a set of files other than
// the embedded ones, so tests can edit, break and add migrations.
var (
	UpFS        = up
	GetStatusFS = getStatus
	LoadFS      = load
)
