"""The needle of the NIAH eval (Sec. 3.3, after Arize AI's test) and its cities: the eval
plants them (ssmax.evals.haystack), the planted training facts must avoid them
(ssmax.data.facts). Here, in data, so that training code does not import the evals."""

from __future__ import annotations

NEEDLE = "The special magic {city} number is: {number}."
QUESTION = "What is the special magic {city} number?"
CITIES = (
    "Tokyo", "Delhi", "Shanghai", "Sao Paulo", "Mexico City", "Cairo", "Mumbai", "Beijing",
    "Dhaka", "Osaka", "New York", "Karachi", "Buenos Aires", "Chongqing", "Istanbul", "Kolkata",
    "Manila", "Lagos", "Rio de Janeiro", "Tianjin", "Kinshasa", "Guangzhou", "Los Angeles",
    "Moscow", "Shenzhen", "Lahore", "Bangalore", "Paris", "Bogota", "Jakarta", "Chennai", "Lima",
    "Bangkok", "Seoul", "Nagoya", "Hyderabad", "London", "Tehran", "Chicago", "Chengdu", "Nanjing",
    "Wuhan", "Ho Chi Minh City", "Luanda", "Ahmedabad", "Kuala Lumpur", "Hong Kong", "Hangzhou",
    "Riyadh", "Santiago", "Madrid", "Baghdad", "Toronto", "Surat", "Pune", "Houston", "Dallas",
    "Khartoum", "Singapore", "Barcelona", "Saint Petersburg", "Philadelphia", "Atlanta",
    "Yangon", "Alexandria", "Abidjan", "Guadalajara", "Ankara", "Melbourne", "Sydney", "Miami",
    "Nairobi", "Johannesburg", "Cape Town", "Berlin", "Rome", "Athens", "Lisbon", "Vienna",
    "Warsaw", "Prague", "Budapest", "Stockholm", "Oslo", "Copenhagen", "Helsinki", "Dublin",
    "Amsterdam", "Brussels", "Zurich", "Montreal", "Vancouver", "Boston", "Seattle", "Havana",
    "Casablanca", "Accra", "Addis Ababa", "Dubai", "Auckland",
)  # fmt: skip
