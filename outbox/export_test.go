package outbox

var StorableJSON = storableJSON

// PurgeSelectSQL is the purge's select on table, for its plan test.
func PurgeSelectSQL(table string) string { return render(table, purgeSelectSQL) }
