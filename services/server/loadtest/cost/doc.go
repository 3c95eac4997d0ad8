// Package cost measures what a load costs the machine, counted rather than
// timed: the database round trips of one pool (dbconn.RoundTrips), the
// transactions, statements (pg_stat_statements) and River jobs of one
// database, the WAL its server writes, and the CPU time of the processes
// involved (this one, a child, a PostgreSQL postmaster with its server
// processes, from /proc). Load tests divide the totals by the deliveries
// they made. WAL and PostgreSQL CPU belong to one run only on a server
// that serves nothing else, such as a private cluster.
package cost
