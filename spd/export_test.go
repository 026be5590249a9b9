package spd

// VecBytes returns the memory of db's classifier bit vectors, for the test
// of the bound classify.go states.
func VecBytes(db *DB) int { return 8 * (len(db.v4.vecs) + len(db.v6.vecs)) }
