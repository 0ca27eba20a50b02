// Command game serves the deep-link sign-in handler of package authorize,
// as a game backend would, at /oauth/authorize (the store's Game Authorize
// URL points there, through your HTTPS front).
//
//	DEEPLINK_API_BASE=https://deeplink.example.com DEEPLINK_STORE_ID=… DEEPLINK_API_KEY=… \
//	  PORT=8090 go run ./examples/game/go
package main

import (
	"log"
	"net/http"
	"os"

	"deeplink/examples/game/go/authorize"
)

func main() {
	h := &authorize.Handler{
		APIBase: os.Getenv("DEEPLINK_API_BASE"),
		StoreID: os.Getenv("DEEPLINK_STORE_ID"),
		APIKey:  os.Getenv("DEEPLINK_API_KEY"),
		// EXAMPLE ONLY: every request is the same fixed player. Your game
		// looks the player up in its own signed-in session instead.
		Player: func(*http.Request) (authorize.Player, error) {
			return authorize.Player{
				ClientReferenceID: "player-42", FirstName: "Ada", LastName: "Lovelace",
				Language: "en", Currency: "GBP", Country: "GB", Timezone: "Europe/London",
			}, nil
		},
	}
	mux := http.NewServeMux()
	mux.Handle("GET /oauth/authorize", h)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8090"
	}
	addr := "127.0.0.1:" + port // behind your reverse proxy, which terminates HTTPS
	log.Printf("game backend on http://%s/oauth/authorize", addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
