# Sourced by upgrade-*/make.sh after they define post, U, WS, A and C: the
# requests both releases' folders share, a read of file:q3.csv shared by A
# and C, then lock:a granted to C, released and granted again.
shared_read_and_relet() {
  post $WS coordination/lease "{\"resource\":\"file:q3.csv\",\"actorDid\":\"$A\",\"mode\":\"read\"}"
  post $WS coordination/lease "{\"resource\":\"file:q3.csv\",\"actorDid\":\"$C\",\"mode\":\"read\"}"
  post $WS coordination/release "{\"resource\":\"file:q3.csv\",\"actorDid\":\"$C\"}"
  post $WS coordination/lease "{\"resource\":\"lock:a\",\"actorDid\":\"$C\"}"
  post $WS coordination/release "{\"resource\":\"lock:a\",\"actorDid\":\"$C\"}"
  post $WS coordination/lease "{\"resource\":\"lock:a\",\"actorDid\":\"$C\"}"
}
